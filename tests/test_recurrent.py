"""Recurrent PPO: core state reset at episode starts, rollout states, ALF's refusals."""

import compiled
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron import api
from heron.agents import ConfigError, NetworkConfig, PPOConfig, base, ppo
from heron.agents.base import ROLLOUT_STATE
from heron.agents.learning import sequences, time_major
from heron.specs import EnvSpec, action_spec_from_space
from heron.training import RunConfig
from heron.types import Experience, StepType, TimeStep

SPEC = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))


def _recurrent(core="lstm", **overrides):
    return PPOConfig(network=NetworkConfig(core=core), **overrides)


def _timestep(step_type, batch=4, seed=0):
    return TimeStep(
        step_type=jnp.full((batch,), step_type, jnp.int32),
        reward=jnp.zeros(batch),
        discount=jnp.ones(batch),
        observation=jax.random.normal(jax.random.PRNGKey(seed), (batch, 3)),
    )


@pytest.mark.parametrize("core", ["lstm", "gru"])
@pytest.mark.parametrize("two_towers", [True, False])
def test_core_state_resets_where_episodes_start(core, two_towers):
    agent = compiled.make(
        "ppo", SPEC, _recurrent(core, two_towers=two_towers, use_rollout_state=True)
    )
    state = agent.init(jax.random.PRNGKey(0))
    carry = agent.initial_carry(4)
    for seed in range(3):  # build up some memory
        _, carry, _ = agent.act(
            state, _timestep(StepType.MID, seed=seed), carry, jax.random.PRNGKey(seed)
        )
    assert all(float(jnp.abs(x).sum()) > 0 for x in jax.tree.leaves(carry))
    first = _timestep(StepType.FIRST, seed=9)
    _, from_memory, extras = agent.act(state, first, carry, jax.random.PRNGKey(5))
    _, from_zero, extras_zero = agent.act(
        state, first, agent.initial_carry(4), jax.random.PRNGKey(5)
    )
    for a, b in zip(jax.tree.leaves(from_memory), jax.tree.leaves(from_zero), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(extras["value"], extras_zero["value"])
    mid = _timestep(StepType.MID, seed=9)
    _, _, extras_mid = agent.act(state, mid, carry, jax.random.PRNGKey(5))
    assert not np.allclose(extras_mid["value"], extras["value"])  # memory matters mid-episode


def _rollout_experience(agent, state, length=8, batch=4):
    """Acts ``length`` steps (an episode starting at step 3), as the driver does."""
    carry = agent.initial_carry(batch)
    steps = []
    for t in range(length):
        step_type = StepType.FIRST if t in (0, 3) else StepType.MID
        timestep = _timestep(step_type, batch, seed=t)
        action, carry, extras = agent.act(state, timestep, carry, jax.random.PRNGKey(t))
        steps.append(Experience.from_timestep(timestep, action, extras))
    return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *steps)  # [B, T]


def test_the_actor_records_its_state_only_under_use_rollout_state():
    with_state = compiled.make("ppo", SPEC, _recurrent(use_rollout_state=True, sequence_length=4))
    without = compiled.make("ppo", SPEC, _recurrent(sequence_length=4))
    carry = jax.tree.map(lambda x: x + 0.2, with_state.initial_carry(4))
    state = with_state.init(jax.random.PRNGKey(0))
    _, _, extras = with_state.act(state, _timestep(StepType.MID), carry, jax.random.PRNGKey(1))
    for a, b in zip(jax.tree.leaves(extras[ROLLOUT_STATE]), jax.tree.leaves(carry), strict=True):
        np.testing.assert_array_equal(a, b)  # the state *before* acting
    _, _, extras = without.act(state, _timestep(StepType.MID), carry, jax.random.PRNGKey(1))
    assert ROLLOUT_STATE not in extras


def test_training_sequences_replay_the_rollout_exactly():
    """From the recorded state, the training unroll reproduces the behaviour's values and
    log-probabilities; so the first PPO step has ratio 1 and zero KL."""
    config = _recurrent(use_rollout_state=True, sequence_length=4, batch_size=8, num_epochs=1)
    agent = compiled.make("ppo", SPEC, config)
    state = agent.init(jax.random.PRNGKey(0))
    experience = _rollout_experience(agent, state, length=9)
    preprocess_and_cut = _batch_of(agent, state, experience, config.sequence_length)
    _, metrics = agent.update(state, preprocess_and_cut, jax.random.PRNGKey(0))
    assert abs(float(metrics["ppo/approx_kl"])) < 1e-6
    assert float(metrics["ppo/clip_fraction"]) == 0.0


def test_without_rollout_state_sequences_start_from_zero():
    config = _recurrent("gru", sequence_length=4, batch_size=8, num_epochs=1)
    agent = compiled.make("ppo", SPEC, config)
    state = agent.init(jax.random.PRNGKey(0))
    experience = _rollout_experience(agent, state, length=9)
    assert ROLLOUT_STATE not in experience.extras  # nothing recorded
    batch = _batch_of(agent, state, experience, config.sequence_length)
    new_state, metrics = agent.update(state, batch, jax.random.PRNGKey(0))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert int(new_state.update_step) == 1


def _batch_of(agent, state, experience, length):
    """The time-major sequences [L, M] ``learn`` gives ``update``: GAE, then cut."""
    batch = ppo.gae_batch(agent.config, state.update_step, experience)
    return time_major(sequences(batch, length, length))


def test_alf_refusals_and_warning():
    run = RunConfig(num_envs=4)
    with pytest.raises(ConfigError, match="never uses its memory: set ppo.use_rollout_state"):
        _recurrent(unroll_length=16, batch_size=16)
    with pytest.raises(
        ConfigError, match="unroll_length=30 is not a multiple of ppo.sequence_length=8"
    ):
        _recurrent(unroll_length=30, sequence_length=8, batch_size=5, use_rollout_state=True)
    base._WARNED.clear()  # the warning is given once per process
    with pytest.warns(UserWarning, match="consider ppo.use_rollout_state True"):
        api.build("ppo", _recurrent("gru", unroll_length=16, sequence_length=8, batch_size=8), run)
    with pytest.raises(ConfigError, match="ppo.network.core must be one of none, lstm, gru"):
        PPOConfig(network=NetworkConfig(core="transformer"))
