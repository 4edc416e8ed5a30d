"""JAX-native physics: Brax's environments (``brax:<name>``) and MuJoCo Playground's
(``playground:<name>``) are JAX environments heron compiles into its iteration, with Box
actions in [-1, 1], termination kept apart from heron's own time limit, several seeds in one
program and checkpoints of their physics state (MJX's holds arrays of no elements) that
resume exactly."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax import envs as brax_envs
from conftest import build, resume, train_until_checkpoint

from heron import envs, presets
from heron.api import train
from heron.cli import main
from heron.envs.brax_style import BraxStyleEnvironment
from heron.training import checkpoints
from heron.types import StepType

CARTPOLE = "playground:CartpoleBalance"  # the smallest dm_control model: 5 observations


@pytest.mark.parametrize(
    "env_id, observations, actions",
    [("brax:fast", 2, 1), ("brax:ant", 27, 8), (CARTPOLE, 5, 1)],
)
def test_physics_envs_are_jax_envs_with_actions_in_minus_1_to_1(env_id, observations, actions):
    env = envs.make(env_id, 3)
    assert env.is_jax and env.num_envs == 3
    assert env.spec.observation_shape == (observations,)
    assert env.spec.observation_dtype == jnp.float32
    assert not env.spec.action.is_discrete and env.spec.action.shape == (actions,)
    low, high = env.spec.action.bounds
    assert np.all(np.asarray(low) == -1.0) and np.all(np.asarray(high) == 1.0)
    assert env.spec.max_episode_steps == 1000  # Brax's training default; Playground's config
    assert envs.make(env_id, 1, max_episode_steps=7).spec.max_episode_steps == 7
    assert envs.is_builtin(env_id)


def test_an_unknown_name_lists_the_familys_names():
    with pytest.raises(envs.UnknownEnvError) as raised:
        envs.make("brax:Ant")
    assert str(raised.value).startswith(
        "unknown brax environment 'Ant' in 'brax:Ant'; brax ids: ant, fast, halfcheetah, hopper,"
    )
    with pytest.raises(envs.UnknownEnvError, match="playground ids: AcrobotSwingup, "):
        envs.make("playground:cheetah-run")


def test_dict_observations_are_served_as_parts():
    env = BraxStyleEnvironment(brax_envs.get_environment("fast", obs_mode="dict_state"), 10, "x")
    jax_env = envs.JaxEnv(env, env.default_params, 2, None, "x")
    assert [(p.name, p.shape) for p in jax_env.spec.observation_parts] == [("state", (2,))]
    _, first = jax_env.reset(jax.random.PRNGKey(0))
    assert first.observation.shape == (2, 2) and first.observation.dtype == jnp.float32


def test_termination_gives_discount_0_and_the_time_limit_truncates_with_discount_1():
    """Brax's inverted pendulum terminates when the pole leans past 0.2 rad; pushed one way it
    falls within the 30-step limit, left alone it stands until heron truncates it."""
    env = envs.make("brax:inverted_pendulum", 2, max_episode_steps=30)

    @jax.jit
    def play(key):
        state, first = env.reset(key)

        def step(state, key):
            state, timestep = env.step(state, jnp.array([[1.0], [0.0]]), key)
            return state, timestep

        return first, jax.lax.scan(step, state, jax.random.split(key, 40))[1]

    first, steps = jax.device_get(play(jax.random.PRNGKey(0)))
    assert (first.step_type == StepType.FIRST).all()
    pushed, alone = steps.step_type[:, 0], steps.step_type[:, 1]
    fell = int(np.argmax(pushed == StepType.LAST))
    assert 0 < fell < 29 and steps.discount[fell, 0] == 0.0
    assert pushed[fell + 1] == StepType.FIRST and steps.reward[fell + 1, 0] == 0.0
    assert (alone[:29] == StepType.MID).all() and alone[29] == StepType.LAST
    assert steps.discount[29, 1] == 1.0 and alone[30] == StepType.FIRST


def test_an_mjx_state_with_empty_arrays_is_checkpointed_and_restored(tmp_path):
    state, _ = jax.jit(envs.make(CARTPOLE, 2).reset)(jax.random.PRNGKey(1))
    empty = [leaf.shape for leaf in jax.tree.leaves(state) if leaf.size == 0]
    assert (2, 0) in empty  # MJX's actuator activations of a model without any
    checkpoints.Checkpointer(str(tmp_path)).save(1, state)
    restored, step = checkpoints.restore(str(tmp_path), state)
    assert step == 1
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_check_env_plays_a_brax_env(capsys):
    assert main(["check-env", "brax:fast", "--steps", "20"]) == 0
    assert '"env": "brax:fast", "ok": true' in capsys.readouterr().out


def test_the_cpu_sized_ppo_preset_on_a_brax_env_resumes_exactly_and_runs_two_seeds(
    tmp_path, monkeypatch
):
    """``brax:ant@cpu``'s PPO (128 envs x 64 steps an iteration, 8 epochs of 8 mini-batches,
    64x64 swish) on Brax's test environment (on Ant itself this test took 4 minutes of a
    core, on Playground's envs their programs compile for minutes; their states' checkpoints
    are checked above): three
    iterations straight, and stopped after checkpoint 2 then resumed, end with the same
    parameters; two seeds in one program differ."""
    config, run = presets.preset("ppo", "brax:ant@cpu")
    iteration = run.num_envs * config.unroll_length
    run = dataclasses.replace(
        run, env="brax:fast", steps=3 * iteration, eval_every_n=3, save_every_n=1,
        done_frac_for_policy_save=0.0,
    )  # fmt: skip
    straight = train(build("ppo", config, run), str(tmp_path / "straight"))
    interrupted = str(tmp_path / "interrupted")
    train_until_checkpoint(monkeypatch, build("ppo", config, run), interrupted, kill_at=2)
    resumed = resume(interrupted)
    assert resumed["params_digest"] == straight["params_digest"]
    assert resumed["final_eval_return"] == straight["final_eval_return"]
    seeds = dataclasses.replace(run, seeds=2, steps=iteration)
    summary = train(build("ppo", config, seeds), str(tmp_path / "seeds"))
    digests = [s["params_digest"] for s in summary["per_seed"]]
    assert len(set(digests)) == 2
