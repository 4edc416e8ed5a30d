import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TIME_LIMIT, rollout

from heron import envs
from heron.agents import PPOConfig
from heron.agents.ppo import gae_batch
from heron.types import Experience, StepType

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


def test_truncated_episode_keeps_its_final_observation(counting_env_id):
    env = envs.make(counting_env_id, num_envs=1)
    steps = rollout(env, np.zeros((2 * TIME_LIMIT + 2, 1), np.int32))
    step_types = [int(s.step_type[0]) for s in steps]
    assert step_types == [FIRST, MID, MID, LAST, FIRST, MID, MID, LAST, FIRST]
    last = steps[TIME_LIMIT]
    assert last.observation[0, 0] == TIME_LIMIT  # the episode's own final observation
    assert last.discount[0] == 1.0  # truncated: bootstrap
    assert last.reward[0] == 1.0
    after = steps[TIME_LIMIT + 1]
    assert after.observation[0, 0] == 0.0 and after.reward[0] == 0.0 and after.discount[0] == 1.0


def test_terminated_episode_has_discount_zero(counting_env_id):
    env = envs.make(counting_env_id, num_envs=2)
    actions = np.array([[1, 0], [0, 0], [0, 0]], np.int32)  # env 0 terminates at once
    steps = rollout(env, actions)
    assert steps[1].step_type.tolist() == [LAST, MID]
    assert steps[1].discount.tolist() == [0.0, 1.0]
    assert steps[2].step_type.tolist() == [FIRST, MID]
    assert steps[3].step_type.tolist() == [MID, LAST]
    assert steps[3].discount.tolist() == [1.0, 1.0]


def _value_targets(env_id, actions, gamma):
    """PPO's value targets (lambda 0) on a rollout whose 'value' of a step is 10 x its obs."""
    env = envs.make(env_id, num_envs=1)
    steps = rollout(env, actions)
    config = PPOConfig(discount=gamma, gae_lambda=0.0)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *steps)  # [B, T+1]
    values = 10.0 * stacked.observation[..., 0]
    experience = Experience.from_timestep(
        stacked,
        jnp.zeros_like(stacked.step_type),
        extras={"value": values, "log_prob": jnp.zeros_like(values)},
    )
    batch = gae_batch(config, 0, experience)
    return np.asarray(batch.value_target[0]), np.asarray(batch.mask[0])


def test_truncation_bootstraps_from_final_observation(counting_env_id):
    gamma = 0.9
    targets, mask = _value_targets(counting_env_id, np.zeros((5, 1), np.int32), gamma)
    # Steps 0..2 are FIRST, MID, MID; step 3 is LAST (truncated, obs 3); step 4 is FIRST.
    np.testing.assert_allclose(targets[2], 1.0 + gamma * 10.0 * TIME_LIMIT, rtol=1e-6)
    np.testing.assert_allclose(targets[:2], 1.0 + gamma * 10.0 * np.array([1.0, 2.0]), rtol=1e-6)
    assert mask.tolist() == [1, 1, 1, 0, 1]  # the LAST step's action was never executed


def test_termination_does_not_bootstrap(counting_env_id):
    targets, mask = _value_targets(counting_env_id, np.array([[0], [1], [0]], np.int32), 0.9)
    np.testing.assert_allclose(targets[1], 1.0, rtol=1e-6)  # terminated at step 2
    assert mask.tolist() == [1, 1, 0]


def test_unknown_env_ids_explain_the_naming():
    with pytest.raises(envs.UnknownEnvError, match="carry their source"):
        envs.make("CartPole-v1")
    with pytest.raises(envs.UnknownEnvError, match="gymnax ids: CartPole-v1"):
        envs.make("gymnax:NoSuchEnv-v0")
    with pytest.raises(envs.UnknownEnvError, match="unknown gym environment"):
        envs.make("gym:NoSuchEnv-v0")


def test_unsupported_observation_space():
    with pytest.raises(ValueError, match="unsupported part 'mission' of the observation space"):
        envs.make("dict_envs:TextPartEnv")
    with pytest.raises(ValueError, match="unsupported observation space Text"):
        envs.make(envs.id_of(TextObservationEnv()))


def test_jax_env_time_limit_override():
    env = envs.make("gymnax:CartPole-v1", num_envs=1, max_episode_steps=2)
    steps = rollout(env, np.zeros((3, 1), np.int32))
    assert [int(s.step_type[0]) for s in steps] == [FIRST, MID, LAST, FIRST]
    assert steps[2].discount[0] == 1.0


def test_continuous_actions_are_clipped_to_the_box():
    env = envs.make("gymnax:Pendulum-v1", num_envs=2)
    state, _ = env.reset(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    _, outside = env.step(state, jnp.array([[5.0], [-7.0]]), key)
    _, at_bounds = env.step(state, jnp.array([[2.0], [-2.0]]), key)
    np.testing.assert_array_equal(outside.observation, at_bounds.observation)
    np.testing.assert_array_equal(outside.reward, at_bounds.reward)


class TextObservationEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Text(8)
    action_space = gymnasium.spaces.Discrete(2)
