"""The agent contract, checked for every registered agent through the same driver paths:
a JAX environment with exact resume after SIGKILL, a Gymnasium environment, several seeds
in one program, and offline training from data collected from its own run where the agent
learns off-policy (the 2-device learner is checked in test_parallel.py). An agent is covered
by adding its case to contract_cases.py."""

import dataclasses
import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import build, resume
from contract_cases import CASES

from heron import agents, api, envs
from heron.training import RunConfig, checkpoints
from heron.training.driver import seed_keys

NAMES = sorted(CASES)


MODELS = ("world-model",)  # models without a policy: tests/test_world_model.py


def test_every_registered_agent_has_a_case_or_is_a_model():
    """Models without a policy only learn from datasets and are scored on held-out data:
    the environment paths are not theirs."""
    assert set(CASES) | set(MODELS) == set(agents.REGISTRY)
    spec = envs.make("gymnax:CartPole-v1").spec
    assert all(agents.make(name, spec).act is None for name in MODELS)


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
def test_trains_on_a_gymnasium_environment(name, tmp_path):
    case = CASES[name]
    summary = api.train(api.build(name, case.config, _run(case.gym_env)), str(tmp_path / "run"))
    _check_run(summary, tmp_path / "run", 512)


@pytest.mark.parametrize("name", NAMES)
def test_several_seeds_in_one_program(name, tmp_path):
    case = CASES[name]
    summary = api.train(
        api.build(name, case.config, _run(case.jax_env, seeds=2, seed=3)), str(tmp_path / "run")
    )
    assert [s["seed"] for s in summary["per_seed"]] == [3, 4]
    assert summary["per_seed"][0]["params_digest"] != summary["per_seed"][1]["params_digest"]
    lines = _lines(tmp_path / "run")
    assert {line["seed"] for line in lines} == {3, 4}
    last = [line for line in lines if line["kind"] == "eval" and line["step"] == 512]
    pairs = sorted((line["seed"], line["temperature"]) for line in last)
    assert pairs == [(3, 0.0), (3, 1.0), (4, 0.0), (4, 1.0)]  # each seed at each temperature


def test_the_seeds_of_one_program_follow_their_single_runs(tmp_path):
    """The seeds of a program collect and update in lockstep, so the learn loop's condition
    and TD3's delayed policy step are one for all of them (``parallel.same_for_all_seeds``:
    branches, not selects). Each seed still follows its own single run, to float tolerance
    (batched kernels round differently), through TD3's delayed and skipped policy steps."""
    case = CASES["td3"]
    config = dataclasses.replace(case.config, policy_delay=2)

    def trained(seed, seeds, label):
        run = _run(case.jax_env, seed=seed, seeds=seeds, steps=256)
        api.train(api.build("td3", config, run), str(tmp_path / label))
        return jax.device_get(api.load_run(str(tmp_path / label))[2].agent_state)

    together = trained(3, 2, "together")
    assert int(together.update_step[0]) > 4 * config.policy_delay
    for k, seed in enumerate((3, 4)):
        alone = trained(seed, 1, f"seed{seed}")
        assert int(alone.update_step[0]) == int(together.update_step[k])
        for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(alone), strict=True):
            np.testing.assert_allclose(a[k], b[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_fresh_iterated_and_restored_states_have_the_same_types(name):
    """One iteration program whatever the state comes from: init, an iteration, or a
    checkpoint (restored leaves are never weakly typed). Gymnax's Python numbers in env
    states made init's leaves weak and an iteration's strong: Pendulum runs compiled the
    iteration twice, and every resume once more. Traced only, nothing compiled."""
    case = CASES[name]
    program = api.build(name, case.config, _run(case.jax_env)).program()
    fresh = jax.eval_shape(program.init, seed_keys([0]))
    iterated = jax.eval_shape(program.iteration, fresh, np.int32(1))[0]
    restored = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), fresh)

    def types(state):
        return [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(state)]

    assert types(fresh) == types(iterated) == types(restored)


# The iteration whose checkpoint the second process is SIGKILLed before writing, its lines
# written (checkpoint 8 saved).
KILL_AT = 16

_KILLED_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from contract_cases import CASES
from heron import api
from heron.cli import configure_compile_cache, program_cache_dir
from heron.training import RunConfig, driver

maybe_save = driver._Loop._maybe_save


def killed_before_saving(loop, iteration, state, stats, last):
    if iteration == {kill_at}:  # SIGKILL: no handler, no cleanup, the lock left behind
        os.kill(os.getpid(), signal.SIGKILL)
    return maybe_save(loop, iteration, state, stats, last)


driver._Loop._maybe_save = killed_before_saving
programs = program_cache_dir(configure_compile_cache())
run = RunConfig(**{run!r})
api.train(api.build({name!r}, CASES[{name!r}].config, run, program_cache=programs), {run_dir!r})
"""


@pytest.mark.parametrize("name", NAMES)
def test_a_run_resumed_after_sigkill_equals_the_uninterrupted_run(name, tmp_path):
    """On a JAX environment: the uninterrupted run (in this process) fulfils the contract; a
    second process running the same configuration is SIGKILLed at iteration KILL_AT, its
    lines written but not its checkpoint, and resumed from its last checkpoint (8) here:
    same parameters, same metrics lines. The
    killed process loads the programs the first run exported (heron's program store)."""
    case = CASES[name]
    run = _run(case.jax_env, eval_every_n=8, save_every_n=8)
    straight = api.train(build(name, case.config, run), str(tmp_path / "a"))
    _check_run(straight, tmp_path / "a", 512)
    run_dir = tmp_path / "b"
    settings = {  # the sub-configs (dist, atari) stay at their defaults
        f.name: getattr(run, f.name)
        for f in dataclasses.fields(run)
        if not dataclasses.is_dataclass(getattr(run, f.name))
    }
    script = _KILLED_SCRIPT.format(
        tests=os.path.dirname(__file__), kill_at=KILL_AT, name=name, run=settings,
        run_dir=str(run_dir),
    )  # fmt: skip
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert checkpoints.latest_step(str(run_dir)) == 8
    trained = [line["iteration"] for line in _lines(run_dir) if line["kind"] == "train"]
    assert trained[-1] == KILL_AT  # lines past the checkpoint, which resuming replaces
    resumed = resume(run_dir)
    assert resumed["params_digest"] == straight["params_digest"]
    strip = lambda lines: [{k: v for k, v in x.items() if k != "wall_s"} for x in lines]  # noqa: E731
    assert strip(_lines(run_dir)) == strip(_lines(tmp_path / "a"))
    if case.offline:
        _train_offline(name, tmp_path / "a", tmp_path)


def _train_offline(name, run_dir, tmp_path):
    """An off-policy agent trains from a dataset collected from its own run's policy."""
    case = CASES[name]
    collected = api.collect(str(run_dir), 12, str(tmp_path / "data"))
    assert collected["episodes"] == 12
    run = _run(case.jax_env, dataset=str(tmp_path / "data"), steps=40, updates_per_iteration=10)
    defaults = type(case.config)()  # options that only change collection are refused offline
    collecting = {o: getattr(defaults, o) for o in getattr(type(case.config), "collecting", {})}
    config = dataclasses.replace(case.config, **collecting)
    summary = api.train(api.build(name, config, run), str(tmp_path / "offline"))
    _check_run(summary, tmp_path / "offline", 40)
    updates = [
        line["train/updates"] for line in _lines(tmp_path / "offline") if "train/updates" in line
    ]
    assert updates == [40.0]  # 4 iterations of 10 updates, in one call
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
