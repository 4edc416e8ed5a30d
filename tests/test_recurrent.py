"""Recurrent PPO: core state reset at episode starts, rollout states, ALF's refusals."""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron import agents
from heron.agents import ConfigError, PPOConfig
from heron.specs import EnvSpec, action_spec_from_space
from heron.training import RunConfig, build
from heron.types import Experience, StepType, TimeStep

SPEC = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))


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
    agent = agents.make(
        "ppo", SPEC, PPOConfig(core=core, two_towers=two_towers, use_rollout_state=True)
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
    """Acts ``length`` steps (an episode starting at step 3), recording states like the driver."""
    carry = agent.initial_carry(batch)
    steps = []
    for t in range(length):
        step_type = StepType.FIRST if t in (0, 3) else StepType.MID
        timestep = _timestep(step_type, batch, seed=t)
        action, new_carry, extras = agent.act(state, timestep, carry, jax.random.PRNGKey(t))
        recorded = carry if agent.schedule.use_rollout_state else ()
        steps.append(Experience.from_timestep(timestep, action, extras, recorded))
        carry = new_carry
    return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *steps)  # [B, T]


def test_training_sequences_replay_the_rollout_exactly():
    """From the recorded state, the training unroll reproduces the behaviour's values and
    log-probabilities; so the first PPO step has ratio 1 and zero KL."""
    config = PPOConfig(
        core="lstm", use_rollout_state=True, mini_batch_length=4, optimizer_batch_size=16
    )
    agent = agents.make("ppo", SPEC, config)
    state = agent.init(jax.random.PRNGKey(0))
    experience = _rollout_experience(agent, state, length=9)
    batch = agent.preprocess(state, experience)  # [B, 8]
    sequences = jax.tree.map(lambda x: x.reshape((8, 4) + x.shape[2:]).swapaxes(0, 1), batch)
    _, metrics = agent.update(state, sequences, jax.random.PRNGKey(0))
    assert abs(float(metrics["ppo/approx_kl"])) < 1e-6
    assert float(metrics["ppo/clip_fraction"]) == 0.0


def test_without_rollout_state_sequences_start_from_zero():
    config = PPOConfig(
        core="gru", use_rollout_state=False, mini_batch_length=4, optimizer_batch_size=16
    )
    agent = agents.make("ppo", SPEC, config)
    state = agent.init(jax.random.PRNGKey(0))
    experience = _rollout_experience(agent, state, length=9)
    batch = agent.preprocess(state, experience)
    assert batch.rollout_state == ()  # nothing recorded
    sequences = jax.tree.map(lambda x: x.reshape((8, 4) + x.shape[2:]).swapaxes(0, 1), batch)
    new_state, metrics = agent.update(state, sequences, jax.random.PRNGKey(0))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert int(new_state.update_step) == 1


def test_alf_refusals_and_warning():
    run = RunConfig(num_envs=4)
    with pytest.raises(ConfigError, match="never uses its memory: set ppo.use_rollout_state"):
        build("ppo", PPOConfig(core="lstm", unroll_length=16, optimizer_batch_size=16), run)
    with pytest.raises(
        ConfigError, match="unroll_length=30 is not a multiple of ppo.mini_batch_length=8"
    ):
        build(
            "ppo",
            PPOConfig(
                core="lstm",
                unroll_length=30,
                mini_batch_length=8,
                optimizer_batch_size=40,
                use_rollout_state=True,
            ),
            run,
        )
    from heron.training import driver

    driver._WARNED.clear()  # the warning is given once per process
    with pytest.warns(UserWarning, match="consider ppo.use_rollout_state True"):
        build(
            "ppo",
            PPOConfig(core="gru", unroll_length=16, mini_batch_length=8, optimizer_batch_size=32),
            run,
        )
    with pytest.raises(ConfigError, match="multiple of ppo.mini_batch_length=8"):
        PPOConfig(core="lstm", mini_batch_length=8, optimizer_batch_size=60)
    with pytest.raises(ConfigError, match="ppo.core must be one of none, lstm, gru"):
        PPOConfig(core="transformer")
