"""Training on one's own environment from the command line: ``--env module.path:Attribute``
and ``--env-module`` (tests/custom_envs.py and tests/custom_env_registry.py stand for a user's
module); ``heron eval``, ``--resume`` and ``heron collect`` rebuild such runs from
config.json, also in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from custom_envs import LIMIT

from heron import envs
from heron.cli import main
from heron.offline import read_dataset
from heron.types import StepType

TESTS = os.path.dirname(os.path.abspath(__file__))
SMALL = [
    "--steps", "128", "--num-envs", "4", "--n-evals", "2", "--eval-every-n", "1",
    "--save-every-n", "1", "--done-frac-for-policy-save", "0",
    "--ppo.unroll-length", "16", "--ppo.batch-size", "32",
]  # fmt: skip


def heron(*argv, cwd):
    """The real entry point in a fresh process (nothing imported before), in ``cwd``."""
    command = os.path.join(os.path.dirname(sys.executable), "heron")
    result = subprocess.run([command, *argv], capture_output=True, text=True, timeout=300, cwd=cwd)
    return result.returncode, result.stdout, result.stderr


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "env_id, is_jax",
    [
        ("custom_envs:TinyEnv", False),  # a gymnasium.Env class
        ("custom_envs:tiny_env", False),  # a factory returning one
        ("custom_envs:counter_pair", True),  # a factory returning a gymnax (env, params)
        ("custom_envs:CounterJaxEnv", True),  # a gymnax Environment class
    ],
)
def test_make_resolves_a_module_path(env_id, is_jax):
    assert envs.parse_env_id(env_id) == (envs.CUSTOM, env_id)
    env = envs.make(env_id, 3)
    assert env.is_jax == is_jax and env.num_envs == 3
    assert env.spec.observation_shape == (2,) and env.spec.action.n_actions == 2
    assert env.spec.max_episode_steps == (LIMIT if is_jax else None)
    limited = envs.make(env_id, 2, max_episode_steps=2)
    assert limited.spec.max_episode_steps == 2


def test_a_class_under_herons_time_limit_is_truncated():
    env = envs.make("custom_envs:TinyEnv", 1, max_episode_steps=2)
    env.reset(jax.random.PRNGKey(0))
    steps = [env.step(None, np.zeros(1, np.int64))[1] for _ in range(3)]
    assert [int(s.step_type[0]) for s in steps] == [StepType.MID, StepType.LAST, StepType.FIRST]
    assert steps[1].discount[0] == 1.0  # truncated: bootstraps


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("no_such_module:Env", "cannot import module 'no_such_module' of "
         "'no_such_module:Env': no module named 'no_such_module'"),
        ("custom_envs:Missing", "module 'custom_envs' has no attribute 'Missing'"),
        ("custom_envs:NUMBER", "'custom_envs:NUMBER' names a int, not an environment class"),
        ("custom_envs:not_an_env", "'custom_envs:not_an_env' gave a dict; a factory must "
         "return a gymnasium.Env, a gymnax Environment or a gymnax (env, params) pair"),
    ],
)  # fmt: skip
def test_bad_module_paths_are_one_line(env_id, message, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "--env", env_id, "--run-dir", str(run_dir), *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.startswith("heron: error: ") and err.count("\n") == 1 and message in err, err
    assert not run_dir.exists()


def test_a_bad_env_module_is_one_line(tmp_path, capsys):
    argv = ["train", "ppo", "--env", "gym:CartPole-v1", "--run-dir", str(tmp_path / "r")]
    assert main([*argv, "--env-module", "no_such_envs"]) == 2
    assert "cannot import env module 'no_such_envs': no module named 'no_such_envs'" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--env-module", "not a module"]) == 2
    assert "env module 'not a module' is not a Python module path" in capsys.readouterr().err


@pytest.mark.parametrize(
    "env_id, message",
    [
        (
            "custom_envs:RaisingStepEnv",
            "the environment custom_envs:RaisingStepEnv raised ValueError in step: the "
            "simulator diverged; training stopped, its last checkpoint (1) is kept",
        ),
        (
            "custom_envs:RaisingJaxEnv",
            "the environment custom_envs:RaisingJaxEnv raised NotImplementedError in step: "
            "(no message)",
        ),
        (
            "custom_envs:RaisingInitEnv",
            "the environment custom_envs:RaisingInitEnv raised RuntimeError in its "
            "constructor: licence file not found",
        ),
    ],
)
def test_an_environment_that_raises_ends_the_run_in_one_line(
    env_id, message, tmp_path, capsys, monkeypatch
):
    """The user's environment raised: which one, in which call, its message, exit 1, no
    traceback (a Gymnasium env's step inside the compiled iteration used to print two
    tracebacks and "INTERNAL: CpuCallback error"; a gymnax env's an empty line)."""
    import custom_envs

    monkeypatch.setattr(custom_envs.RaisingStepEnv, "steps", 0)
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "--env", env_id, "--run-dir", str(run_dir), *SMALL]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("heron:")]
    assert lines == [f"heron: error: {message}"] and "Traceback" not in err  # beside progress
    if env_id.endswith("RaisingStepEnv"):  # `heron eval` of its checkpoint says it alike
        assert main(["eval", str(run_dir), "--episodes", "2"]) == 1
        err = capsys.readouterr().err
        assert err.splitlines() == [f"heron: error: {message.split(';')[0]}"]


def test_module_path_run_trains_evaluates_resumes_and_collects(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--env", "custom_envs:TinyEnv", "--run-dir", str(run_dir)]
    assert main([*argv, *SMALL]) == 0
    assert last_json(capsys.readouterr().out)["steps"] == 128
    assert json.load(open(run_dir / "config.json"))["run"]["env"] == "custom_envs:TinyEnv"

    # a fresh process, started where the user's module is
    code, out, err = heron("eval", str(run_dir), "--episodes", "3", cwd=TESTS)
    assert code == 0, err
    evaluation = last_json(out)
    assert evaluation["episodes"] == 3 and evaluation["checkpoint"] == 2
    assert 1.0 <= evaluation["return_mean"] <= LIMIT  # reward 1 a step, at most LIMIT steps

    code, out, err = heron("train", "--resume", str(run_dir), "--steps", "192", cwd=TESTS)
    assert code == 0, err
    assert last_json(out)["steps"] == 192

    assert main(["collect", str(run_dir), "--episodes", "4", "--out", str(tmp_path / "d")]) == 0
    dataset = read_dataset(tmp_path / "d")
    assert dataset.num_episodes == 4
    assert dataset.metadata["heron_env"] == "custom_envs:TinyEnv"
    for episode in dataset.episodes:  # the env's known episodes
        np.testing.assert_allclose(episode.observations[:, 1], 1.0)
        assert episode.rewards.sum() == episode.num_steps <= LIMIT


def test_env_module_run_is_rebuilt_from_config_json(tmp_path, capsys):
    """--env-module imports the user's module (its gymnasium.register / heron.envs.register
    calls) before the env is made; eval and resume in a fresh process import it again from
    config.json (without it, 'gym:HeronTiny-v0' is unknown there)."""
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--env", "heron:Counter-v0", "--env-module", "custom_env_registry"]
    assert main([*argv, "--run-dir", str(run_dir), "--seeds", "2", *SMALL]) == 0
    capsys.readouterr()
    assert json.load(open(run_dir / "config.json"))["run"]["env_module"] == "custom_env_registry"

    code, _, err = heron("eval", str(run_dir), cwd=TESTS)
    assert code == 0, err
    code, out, err = heron("train", "--resume", str(run_dir), "--steps", "192", cwd=TESTS)
    assert code == 0, err
    assert last_json(out)["steps"] == 192 and len(last_json(out)["per_seed"]) == 2

    gym_run = tmp_path / "gym_run"  # trained here, evaluated in a fresh process
    argv = ["train", "ppo", "--env", "gym:HeronTiny-v0", "--env-module", "custom_env_registry"]
    assert main([*argv, "--run-dir", str(gym_run), *SMALL]) == 0
    code, out, err = heron("eval", str(gym_run), "--episodes", "2", cwd=TESTS)
    assert code == 0, err
    assert last_json(out)["episodes"] == 2

    # without the module the id is unknown: one line, not a traceback
    code, _, err = heron("check-env", "gym:HeronTiny-v0", cwd=TESTS)
    assert code == 2 and "unknown gym environment 'HeronTiny-v0'" in err
    assert err.count("\n") == 1


def test_environment_objects_are_accepted_from_python():
    """``RunConfig(env=MyEnv())`` as SB3 users write it: a Gymnasium env (copied for each
    environment of the run) or a gymnax pair runs as ``heron:<class name>``."""
    import custom_envs

    import heron

    tiny = custom_envs.TinyEnv()
    run = heron.RunConfig(env=tiny, num_envs=3)
    assert run.env == "heron:TinyEnv" and heron.RunConfig(env=tiny).env == run.env
    made = envs.make(run.env, 3)
    assert not made.is_jax and made.spec.observation_shape == (2,)
    _, first = made.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(np.asarray(first.observation)[:, 0], 0.0)
    assert heron.RunConfig(env=custom_envs.TinyEnv()).env == "heron:TinyEnv-2"  # another one
    pair = heron.RunConfig(env=custom_envs.counter_pair()).env
    assert pair.startswith("heron:CounterJaxEnv") and envs.make(pair, 2).is_jax
    heron.build("ppo", run=heron.RunConfig(env=tiny, num_envs=8, steps=64))  # traced
    with pytest.raises(ValueError, match="is not an environment: pass an id string"):
        heron.RunConfig(env=object())
