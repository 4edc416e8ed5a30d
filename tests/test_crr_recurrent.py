"""Recurrent CRR: the target networks skip observation 0 and start from the state recorded
before step 1, rollout states, acting carries the states of the action taken (Boltzmann:
of the chosen sample), and runs through the driver."""

import dataclasses

import compiled
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build, resume, train_until_checkpoint
from test_crr import BOX, SMALL, _sequences, _small_crr_run

from heron import api
from heron.agents import CRRConfig, crr
from heron.agents.actions import from_box
from heron.agents.base import ROLLOUT_STATE, ReplayConfig
from heron.types import StepType, TimeStep

RECURRENT = dict(SMALL, network=dataclasses.replace(SMALL["network"], core="gru", core_size=8))


def _randomised(params, seed=0):
    """Every weight drawn at random (the heads start at zero, which hides the inputs)."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    noise = [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    return jax.tree.unflatten(treedef, noise)


def _state(agent):
    state = agent.init(jax.random.PRNGKey(0))
    policy, critic = _randomised(state.policy_params, 1), _randomised(state.critic_params, 2)
    return state._replace(
        policy_params=policy, critic_params=critic,
        target_policy_params=policy, target_critic_params=critic,
    )  # fmt: skip


def _with_rollout_states(agent, batch, offset=0.5):
    carry = agent.initial_carry(batch.step_type.shape[1])
    length = batch.step_type.shape[0]
    stored = jax.tree.map(lambda x: jnp.broadcast_to(x + offset, (length,) + x.shape), carry)
    return batch._replace(extras={ROLLOUT_STATE: stored})


def _targets_of(config):
    """``targets(state, batch [L, M], key) -> [L-1, M, atoms]``: the TD targets ``update``
    computes from the same arguments."""
    networks = crr.networks(BOX, config)
    return jax.jit(lambda *args: crr.next_step_targets(networks, config, *args))


@pytest.mark.parametrize("core", ["lstm", "gru"])
@pytest.mark.parametrize("use_rollout_state", [False, True])
def test_recurrent_update(core, use_rollout_state):
    network = dataclasses.replace(RECURRENT["network"], core=core)
    config = CRRConfig(**dict(RECURRENT, network=network), use_rollout_state=use_rollout_state)
    agent = compiled.make("crr", BOX, config)
    state = agent.init(jax.random.PRNGKey(0))
    batch = _sequences(BOX, length=4)
    if use_rollout_state:
        batch = _with_rollout_states(agent, batch)
    new_state, metrics = agent.update(state, batch, jax.random.PRNGKey(1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), state, new_state)
    assert max(jax.tree.leaves(moved.critic_params)) > 0
    assert max(jax.tree.leaves(moved.policy_params)) > 0
    if use_rollout_state:  # the update starts from the recorded states, not from zeros
        zeros = _with_rollout_states(agent, batch, offset=0.0)
        _, zero_metrics = agent.update(state, zeros, jax.random.PRNGKey(1))
        for name in ("grad_norm/critic", "grad_norm/policy"):
            assert float(zero_metrics[name]) != pytest.approx(float(metrics[name]), rel=1e-4)


def test_target_networks_skip_observation_zero():
    config = CRRConfig(**RECURRENT)
    agent = compiled.make("crr", BOX, config)
    targets = _targets_of(config)
    state = _state(agent)
    batch = _sequences(BOX, length=4)
    changed = batch._replace(observation=batch.observation.at[0].add(3.0))
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(targets(state, batch, key), targets(state, changed, key))
    later = batch._replace(observation=batch.observation.at[1].add(3.0))
    assert not np.allclose(targets(state, batch, key), targets(state, later, key))


def test_targets_start_from_the_state_recorded_before_step_one():
    """With rollout states the target networks, which first see observation 1, start from
    the state recorded before step 1 (not the one before step 0: no one-step gap)."""
    config = CRRConfig(**RECURRENT, use_rollout_state=True)
    agent = compiled.make("crr", BOX, config)
    targets = _targets_of(config)
    state, key = _state(agent), jax.random.PRNGKey(3)
    batch = _with_rollout_states(agent, _sequences(BOX, length=4))
    recorded = batch.extras[ROLLOUT_STATE]

    def shifted(t):
        moved = jax.tree.map(lambda x: x.at[t].add(1.0), recorded)
        return batch._replace(extras={ROLLOUT_STATE: moved})

    base = targets(state, batch, key)
    np.testing.assert_array_equal(base, targets(state, shifted(0), key))
    assert not np.allclose(base, targets(state, shifted(1), key))
    np.testing.assert_array_equal(base, targets(state, shifted(2), key))  # only the start


def test_acting_carries_the_states_of_the_action_taken():
    for acting in ("policy", "boltzmann"):
        config = CRRConfig(**RECURRENT, acting=acting, boltzmann_samples=5)
        agent = compiled.make("crr", BOX, config)
        state = _state(agent)
        observation = jax.random.normal(jax.random.PRNGKey(2), (6, 3))
        step_type = jnp.array([0, 1, 1, 0, 1, 1], jnp.int32)
        timestep = TimeStep(step_type, jnp.zeros(6), jnp.ones(6), observation)
        carry = jax.tree.map(lambda x: x + 0.3, agent.initial_carry(6))
        action, new_carry, _ = agent.act(state, timestep, carry, jax.random.PRNGKey(3))
        assert action.shape == (6, 1) and bool(jnp.all(jnp.abs(action) <= 2.0))
        first = step_type == StepType.FIRST
        networks = crr.networks(BOX, config)
        policy, critic = networks.policy, networks.critic.network
        critic_input = jnp.concatenate([observation, from_box(BOX.action, action)], -1)
        expected_critic, _ = critic.step(state.critic_params, carry["critic"], critic_input, first)
        np.testing.assert_allclose(new_carry["critic"], expected_critic, atol=1e-5)
        expected_policy, _ = policy.step(state.policy_params, carry["policy"], observation, first)
        np.testing.assert_allclose(new_carry["policy"], expected_policy, atol=1e-6)


def test_recurrent_crr_runs_and_resumes_through_the_driver(tmp_path, monkeypatch):
    config = CRRConfig(
        batch_size=16,
        replay=ReplayConfig(min_size=64, ratio=0.5),
        unroll_length=2,
        sequence_length=4,
        use_rollout_state=True,
        **RECURRENT,
    )
    run = _small_crr_run(steps=256, save_every_n=16)
    straight = api.train(build("crr", config, run), str(tmp_path / "a"))
    assert straight["steps"] == 256 and np.isfinite(straight["final_eval_return"])
    train_until_checkpoint(monkeypatch, build("crr", config, run), tmp_path / "b", 16)
    assert resume(tmp_path / "b")["params_digest"] == straight["params_digest"]
