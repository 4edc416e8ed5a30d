"""The agent contract, checked for every registered agent through the same driver paths:
a JAX environment, a Gymnasium environment, several seeds in one program, exact resume
after SIGKILL, and offline training from a dataset where the agent learns off-policy (the
2-device learner is checked in test_parallel.py). An agent is covered by adding its case to
contract_cases.py."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from contract_cases import CASES

from heron import agents, api
from heron.training import RunConfig, checkpoints

NAMES = sorted(CASES)


def test_every_registered_agent_has_a_case():
    assert set(CASES) == set(agents.REGISTRY)


def _run(env: str, **overrides) -> RunConfig:
    settings = dict(
        env=env,
        steps=512,
        num_envs=4,
        n_evals=2,
        eval_every_n=16,
        eval_temperatures=(1.0, 0.0),
        save_every_n=8,
        done_frac_for_policy_save=0.0,
    )
    return RunConfig(**{**settings, **overrides})


def _lines(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


def _check_run(summary, run_dir, steps):
    assert summary["steps"] == steps and len(summary["params_digest"]) == 64
    assert summary["final_eval_return"] is not None
    lines = _lines(run_dir)
    assert sum(line["train/updates"] for line in lines if line["kind"] == "train") > 0
    evals = [line for line in lines if line["kind"] == "eval"]
    assert {line["temperature"] for line in evals} == {1.0, 0.0}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["jax_env", "gym_env"])
def test_trains_on_jax_and_gymnasium_environments(name, kind, tmp_path):
    case = CASES[name]
    run = _run(getattr(case, kind))
    summary = api.train(api.build(name, case.config, run), str(tmp_path / "run"))
    _check_run(summary, tmp_path / "run", 512)


@pytest.mark.parametrize("name", NAMES)
def test_several_seeds_in_one_program(name, tmp_path):
    case = CASES[name]
    summary = api.train(
        api.build(name, case.config, _run(case.jax_env, seeds=2, seed=3)), str(tmp_path / "run")
    )
    assert [s["seed"] for s in summary["per_seed"]] == [3, 4]
    assert summary["per_seed"][0]["params_digest"] != summary["per_seed"][1]["params_digest"]
    assert {line["seed"] for line in _lines(tmp_path / "run")} == {3, 4}


_TRAIN_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from contract_cases import CASES
from heron import api
from heron.cli import configure_compile_cache
from heron.training import RunConfig
configure_compile_cache()
case = CASES[{name!r}]
run = RunConfig(**{run!r})
print(api.train(api.build({name!r}, case.config, run), {run_dir!r})["params_digest"])
"""


def _train_process(name, run_settings, run_dir):
    script = _TRAIN_SCRIPT.format(
        tests=os.path.dirname(__file__), name=name, run=run_settings, run_dir=str(run_dir)
    )
    return [sys.executable, "-c", script]


@pytest.mark.parametrize("name", NAMES)
def test_sigkill_then_resume_equals_the_uninterrupted_run(name, tmp_path):
    case = CASES[name]
    settings = dict(
        env=case.jax_env, steps=1024, num_envs=4, n_evals=2, eval_every_n=16,
        eval_temperatures=(0.0,), save_every_n=4, done_frac_for_policy_save=0.0,
    )  # fmt: skip
    straight = subprocess.run(
        _train_process(name, settings, tmp_path / "a"), capture_output=True, text=True, timeout=600
    )
    assert straight.returncode == 0, straight.stderr[-2000:]
    expected = straight.stdout.strip().splitlines()[-1]
    run_dir = tmp_path / "b"
    process = subprocess.Popen(
        _train_process(name, settings, run_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and checkpoints.latest_step(str(run_dir)) is None:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = checkpoints.latest_step(str(run_dir))
    total = api.build(name, case.config, RunConfig(**settings)).iterations
    assert killed_at is not None and killed_at < total  # killed before the end
    resumed = api.resume(str(run_dir))
    assert resumed["params_digest"] == expected
    strip = lambda lines: [{k: v for k, v in x.items() if k != "wall_s"} for x in lines]  # noqa: E731
    assert strip(_lines(run_dir)) == strip(_lines(tmp_path / "a"))


@pytest.mark.parametrize("name", [name for name in NAMES if CASES[name].offline])
def test_learns_offline_from_its_own_collected_data(name, tmp_path):
    case = CASES[name]
    online = _run(case.jax_env, steps=256)
    api.train(api.build(name, case.config, online), str(tmp_path / "online"))
    collected = api.collect(str(tmp_path / "online"), 12, str(tmp_path / "data"))
    assert collected["episodes"] == 12
    run = _run(case.jax_env, dataset=str(tmp_path / "data"), steps=40, updates_per_iteration=10)
    summary = api.train(api.build(name, case.config, run), str(tmp_path / "offline"))
    _check_run(summary, tmp_path / "offline", 40)
    updates = [
        line["train/updates"] for line in _lines(tmp_path / "offline") if "train/updates" in line
    ]
    assert updates == [10.0] * 4
    assert np.isfinite(summary["final_eval_return"])


@pytest.mark.parametrize("name", [name for name in NAMES if not CASES[name].offline])
def test_on_policy_agents_refuse_a_dataset(name, tmp_path):
    case = CASES[name]
    with pytest.raises(api.ConfigError, match=f"{name} learns on-policy"):
        api.build(name, case.config, _run(case.jax_env, dataset=str(tmp_path)))


SPACES = {"discrete": "gymnax:CartPole-v1", "continuous": "gymnax:Pendulum-v1"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", sorted(SPACES))
def test_action_spaces_are_served_or_refused_by_name(name, kind):
    from heron import envs

    spec = envs.make(SPACES[kind], 1).spec
    if kind in CASES[name].serves:
        assert agents.make(name, spec, CASES[name].config).name == name
        return
    with pytest.raises(agents.ConfigError) as error:
        agents.make(name, spec, CASES[name].config)
    message = str(error.value)
    assert message.startswith(name) and all(k in message for k in CASES[name].serves)
