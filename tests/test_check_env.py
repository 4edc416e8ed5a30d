"""``heron.envs.check`` / ``heron check-env``: good environments pass, each deliberately broken
one is reported in one line naming its problem (and only that problem)."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
from custom_envs import (
    LIMIT,
    BadRewardEnv,
    NanJaxEnv,
    NanObservationEnv,
    NoOptionsResetEnv,
    OldStepEnv,
    OutsideSpaceEnv,
    TimeLimitAsTerminationEnv,
    TinyEnv,
    UnseededResetEnv,
    WrongDtypeEnv,
    WrongShapeJaxEnv,
    WrongShapeStepEnv,
    counter_pair,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import envs
from heron.cli import main


@pytest.mark.parametrize(
    "env_id, kind",
    [
        ("gymnax:CartPole-v1", "jax"),
        ("gym:CartPole-v1", "gymnasium"),
        ("heron:CartPole-masked-v1", "jax"),
    ],
)
def test_good_environments_pass(env_id, kind):
    report = envs.check(env_id, steps=300)
    assert report.ok and report.problems == [] and report.notes == []
    assert report.kind == kind
    assert report.episodes > 0 and report.terminated == report.episodes  # CartPole falls
    assert report.steps_per_s > 0
    expected_steps = 300 * 16 if kind == "jax" else 300
    assert report.steps == expected_steps


def test_a_gymnasium_instance_and_a_gymnax_pair_are_checked_too():
    report = envs.check(TinyEnv(), steps=50)
    assert report.ok and report.kind == "gymnasium"
    # random actions: each episode ends by action 1 (terminated) or after LIMIT steps
    assert report.episodes == report.terminated + report.truncated > 0
    pair = envs.check(counter_pair(), steps=50)
    assert pair.ok and pair.kind == "jax" and pair.truncated > 0 and pair.terminated > 0


@pytest.mark.parametrize(
    "env, message",
    [
        (
            WrongDtypeEnv,
            "reset: the observation has dtype float64, the observation space says float32",
        ),
        (NanObservationEnv, "step 0: the observation has a non-finite value nan"),
        (UnseededResetEnv, "reset(seed=0) twice gave different observations"),
        (
            OutsideSpaceEnv,
            "reset: the observation is outside the observation space: entry (1,) "
            "is 2.0, outside [0.0, 1.0]",
        ),
        (
            WrongShapeStepEnv,
            "step 0: the observation has shape (3,), the observation space says (2,)",
        ),
        (NoOptionsResetEnv, "reset(seed=..., options=...) failed"),
        (OldStepEnv, "step 0: step returned 4 values (the old gym API"),
    ],
)
def test_each_broken_environment_gets_its_one_line(env, message):
    report = envs.check(env(), steps=200)
    assert not report.ok
    assert len(report.problems) == 1, report.problems
    assert message in report.problems[0]
    assert "\n" not in report.problems[0]


def test_reward_and_flag_types():
    report = envs.check(BadRewardEnv(), steps=20)
    assert len(report.problems) == 2
    assert report.problems[0] == "step 0: the reward must be a number, got a list [1.0]"
    assert report.problems[1].startswith("step 0: terminated must be a bool, got a int ")


def test_a_time_limit_reported_as_termination_gets_a_note():
    report = envs.check(TimeLimitAsTerminationEnv(), steps=40)
    assert report.ok  # not wrong as such, but worth a note
    assert report.terminated == report.episodes == 40 // LIMIT
    assert report.notes == [
        f"every episode terminated after exactly {LIMIT} steps: if that is a time limit, "
        "report it as truncated=True (heron bootstraps from a truncated episode's final "
        "observation, never from a terminated one's)"
    ]


def test_broken_jax_environments():
    report = envs.check(NanJaxEnv(), steps=10)
    assert report.kind == "jax" and not report.ok
    assert any("the observation has a non-finite value nan" in p for p in report.problems)
    assert any(
        "step 0 (environment 0): the observation is outside the observation space: "
        "entry (1,) is 3.0, outside [0.0, 1.0]" in p
        for p in report.problems
    )
    shape = envs.check(WrongShapeJaxEnv(), steps=10)
    assert shape.problems == [  # one line per kind of problem: the first occurrence
        "reset: the observation has shape (3,), the observation space says (2,)"
    ]


def test_what_check_takes():
    with pytest.raises(envs.UnknownEnvError, match="check takes an environment id"):
        envs.check(42)
    with pytest.raises(ValueError, match="steps must be > 0"):
        envs.check("gym:CartPole-v1", steps=0)


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple),
    low=st.floats(-5, 5),
    width=st.floats(0.1, 5),
    offset=st.floats(-10, 10),
    corner=st.booleans(),
)
def test_bounds_are_reported_exactly_when_an_entry_leaves_the_box(
    shape, low, width, offset, corner
):
    """A constant observation: inside the Box -> no problem; one entry moved outside -> one
    bounds problem naming that entry."""
    high = low + width
    inside = np.full(shape, (low + high) / 2, np.float32)
    observation = inside.copy()
    index = tuple(s - 1 for s in shape) if corner else (0,) * len(shape)
    observation[index] = np.float32(inside[index] + offset)

    class ConstantEnv(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(low, high, shape, np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return observation.copy(), {}

        def step(self, action):
            return observation.copy(), 0.0, True, False, {}

    space = ConstantEnv.observation_space
    outside = not (space.low[index] <= observation[index] <= space.high[index])
    report = envs.check(ConstantEnv(), steps=3)
    if outside:
        assert len(report.problems) == 1
        assert f"entry {index} is {np.float64(observation[index])}" in report.problems[0]
    else:
        assert report.problems == []


def test_check_env_command(capsys):
    assert main(["check-env", "gym:CartPole-v1", "--steps", "100"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] is True and summary["env"] == "gym:CartPole-v1"
    assert summary["steps"] == 100 and summary["problems"] == []

    assert main(["check-env", "custom_envs:WrongDtypeEnv", "--steps", "20"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["ok"] is False and len(summary["problems"]) == 1
    assert captured.err == f"heron: problem: {summary['problems'][0]}\n"

    assert main(["check-env", "gym:NoSuch-v0"]) == 2
    assert "unknown gym environment 'NoSuch-v0'" in capsys.readouterr().err
    assert main(["check-env", "gym:CartPole-v1", "--steps", "0"]) == 2
    assert "--steps must be > 0, got 0" in capsys.readouterr().err


def test_check_env_imports_the_env_module(capsys):
    argv = ["check-env", "heron:Counter-v0", "--env-module", "custom_env_registry"]
    assert main([*argv, "--steps", "30"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "jax"
