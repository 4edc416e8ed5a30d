"""Recurrent CRR: cores reset at FIRST, the target networks skip observation 0, rollout
states, Boltzmann acting keeps the chosen sample's states, and runs through the driver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_crr import BOX, SMALL, _sequences, _small_crr_run

from heron import agents
from heron.agents import CRRConfig, crr
from heron.networks import actor_critic
from heron.types import StepType, TimeStep

RECURRENT = dict(SMALL, core="gru", core_size=8)


def _networks(config):
    atoms = jnp.linspace(config.vmin, config.vmax, config.num_atoms)
    return crr._recurrent(BOX, config, atoms)


def _randomised(params, seed=0):
    """Every weight drawn at random (the heads start at zero, which hides the inputs)."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    noise = [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    return jax.tree.unflatten(treedef, noise)


def _initialised(networks):
    policy_params, critic_params = networks.init(jax.random.PRNGKey(0))
    return _randomised(policy_params, 1), _randomised(critic_params, 2)


@pytest.mark.parametrize("core", ["lstm", "gru"])
@pytest.mark.parametrize("use_rollout_state", [False, True])
def test_recurrent_update(core, use_rollout_state):
    config = CRRConfig(**dict(RECURRENT, core=core), use_rollout_state=use_rollout_state)
    agent = agents.make("crr", BOX, config)
    assert agent.schedule.recurrent and agent.schedule.use_rollout_state == use_rollout_state
    state = agent.init(jax.random.PRNGKey(0))
    batch = _sequences(BOX, length=4)
    if use_rollout_state:
        carry = agent.initial_carry(8)
        stored = jax.tree.map(lambda x: jnp.broadcast_to(x + 0.5, (4,) + x.shape), carry)
        batch = batch._replace(state=stored)
    new_state, metrics = agent.update(state, batch, jax.random.PRNGKey(1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), state, new_state)
    assert max(jax.tree.leaves(moved.critic_params)) > 0
    assert max(jax.tree.leaves(moved.policy_params)) > 0
    if use_rollout_state:  # the update starts from the recorded states, not from zeros
        zeros = batch._replace(state=jax.tree.map(jnp.zeros_like, batch.state))
        _, zero_metrics = agent.update(state, zeros, jax.random.PRNGKey(1))
        # (zero-initialised heads make the first losses state-independent; gradients are not)
        for name in ("grad_norm/critic", "grad_norm/policy"):
            assert float(zero_metrics[name]) != pytest.approx(float(metrics[name]), rel=1e-4)


def test_target_networks_skip_observation_zero():
    config = CRRConfig(**RECURRENT)
    networks = _networks(config)
    policy_params, critic_params = _initialised(networks)
    batch = _sequences(BOX, length=4)
    changed = batch._replace(observation=batch.observation.at[0].add(3.0))
    initial = networks.initial_carry(8)
    samples = jnp.zeros((2, 3, 8, 1))

    def views(batch, start):
        return (
            networks.policy_view(policy_params, batch, start, initial),
            networks.critic_view(critic_params, batch, start, initial)(samples),
        )

    for a, b in zip(
        jax.tree.leaves(views(batch, 1)), jax.tree.leaves(views(changed, 1)), strict=True
    ):
        np.testing.assert_array_equal(a, b)  # the next-step (target) side never sees obs 0
    online, online_changed = views(batch, 0), views(changed, 0)
    assert not np.allclose(online[1][:, 1:], online_changed[1][:, 1:])  # memory of obs 0


def test_cores_reset_where_episodes_start():
    config = CRRConfig(**RECURRENT)
    networks = _networks(config)
    policy_params, critic_params = _initialised(networks)
    batch = _sequences(BOX, length=4)
    batch = batch._replace(step_type=batch.step_type.at[2].set(StepType.FIRST))
    changed = batch._replace(observation=batch.observation.at[:2].add(3.0))
    initial = networks.initial_carry(8)
    samples = jnp.zeros((2, 3, 8, 1))
    before = networks.critic_view(critic_params, batch, 0, initial)(samples)
    after = networks.critic_view(critic_params, changed, 0, initial)(samples)
    np.testing.assert_array_equal(before[:, 2], after[:, 2])  # step 2 starts afresh
    assert not np.allclose(before[:, 1], after[:, 1])
    policy = networks.policy_view(policy_params, batch, 0, initial)
    policy_changed = networks.policy_view(policy_params, changed, 0, initial)
    np.testing.assert_array_equal(policy["mean"][2], policy_changed["mean"][2])


def test_acting_carries_the_states_of_the_action_taken():
    for acting in ("policy", "boltzmann"):
        config = CRRConfig(**RECURRENT, acting=acting, boltzmann_samples=5)
        agent = agents.make("crr", BOX, config)
        state = agent.init(jax.random.PRNGKey(0))
        observation = jax.random.normal(jax.random.PRNGKey(2), (6, 3))
        step_type = jnp.array([0, 1, 1, 0, 1, 1], jnp.int32)
        timestep = TimeStep(step_type, jnp.zeros(6), jnp.ones(6), observation)
        carry = jax.tree.map(lambda x: x + 0.3, agent.initial_carry(6))
        action, (policy_state, critic_state), _ = agent.act(
            state, timestep, carry, jax.random.PRNGKey(3)
        )
        assert action.shape == (6, 1) and bool(jnp.all(jnp.abs(action) <= 2.0))
        first = step_type == StepType.FIRST
        expected_critic, _ = crr.RecurrentCritic(
            BOX.action, config.hidden_sizes, config.core, config.core_size, config.num_atoms
        ).apply(
            state.critic_params,
            carry[1],
            observation,
            actor_critic.from_box(BOX.action, action),
            first,
        )
        np.testing.assert_allclose(critic_state, expected_critic, atol=1e-5)
        expected_policy, _ = crr.RecurrentPolicy(
            BOX.action, config.hidden_sizes, config.core, config.core_size
        ).apply(state.policy_params, carry[0], observation, first)
        np.testing.assert_allclose(policy_state, expected_policy, atol=1e-6)


def test_recurrent_crr_runs_and_resumes_through_the_driver(tmp_path, monkeypatch):
    from heron.training import build, checkpoints, resume, train

    config = CRRConfig(
        mini_batch_size=16,
        min_replay_size=64,
        replay_ratio=0.5,
        unroll_length=2,
        mini_batch_length=4,
        use_rollout_state=True,
        **RECURRENT,
    )
    straight = train(
        build("crr", config, _small_crr_run(steps=256, save_every_n=16)), str(tmp_path / "a")
    )
    assert straight["steps"] == 256 and np.isfinite(straight["final_eval_return"])
    original = checkpoints.Checkpointer.save

    class Killed(Exception):
        pass

    def save_then_die(self, step, state):
        original(self, step, state)
        if step == 16:
            raise Killed

    monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_die)
    with pytest.raises(Killed):
        train(build("crr", config, _small_crr_run(steps=256, save_every_n=16)), str(tmp_path / "b"))
    monkeypatch.setattr(checkpoints.Checkpointer, "save", original)
    assert resume(str(tmp_path / "b"))["params_digest"] == straight["params_digest"]
