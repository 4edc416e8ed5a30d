import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TIME_LIMIT, rollout
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import envs
from heron.configs import ConfigError
from heron.envs.wrappers import ObservationPipeline, RunningStats
from heron.run_config import RunConfig
from heron.types import StepType, TimeStep


def _apply_all(pipeline, steps, update_stats=True):
    state = pipeline.init(steps[0].step_type.shape[0])
    seen = []
    for raw in steps:
        state, timestep = pipeline.apply(state, raw, update_stats)
        seen.append(timestep)
    return state, seen


def test_history_stacks_the_last_k_and_resets_at_episode_starts(counting_env_id):
    env = envs.make(counting_env_id, num_envs=1)
    steps = rollout(env, np.zeros((2 * TIME_LIMIT + 1, 1), np.int32))
    pipeline = ObservationPipeline(env.spec, history=3)
    assert pipeline.spec.observation_shape == (3, 1)
    _, seen = _apply_all(pipeline, steps)
    stacks = [np.asarray(t.observation)[0, :, 0].tolist() for t in seen]
    assert stacks == [
        [0, 0, 0],  # FIRST: filled with the first observation
        [0, 0, 1],
        [0, 1, 2],
        [1, 2, 3],  # LAST: the episode's own final observation
        [0, 0, 0],  # the next episode starts afresh
        [0, 0, 1],
        [0, 1, 2],
        [1, 2, 3],
    ]


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_running_stats_match_numpy(sizes, seed):
    rng = np.random.default_rng(seed)
    batches = [rng.normal(3.0, 2.0, size=(n, 2)).astype(np.float32) for n in sizes]
    stats = RunningStats.zeros((2,))
    for batch in batches:
        stats = stats.update(jnp.asarray(batch))
    everything = np.concatenate(batches)
    assert float(stats.count) == len(everything)
    np.testing.assert_allclose(stats.mean, everything.mean(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats.var, everything.var(axis=0), rtol=1e-3, atol=1e-4)


def test_normalisation_updates_only_when_asked_and_scales_rewards():
    env = envs.make("gymnax:CartPole-v1", num_envs=8)
    steps = rollout(env, np.zeros((20, 8), np.int32))
    pipeline = ObservationPipeline(env.spec, normalize=True, reward_scale=0.1)
    state, seen = _apply_all(pipeline, steps)
    observations = np.concatenate([s.observation for s in steps])
    np.testing.assert_allclose(state.stats.mean, observations.mean(axis=0), atol=1e-5)
    assert float(state.stats.count) == len(observations)
    np.testing.assert_allclose(seen[5].reward, 0.1 * steps[5].reward)
    frozen, _ = _apply_all(pipeline, steps, update_stats=False)
    assert float(frozen.stats.count) == 0.0
    last = np.asarray(seen[-1].observation)
    expected = (steps[-1].observation - state.stats.mean) / np.sqrt(state.stats.var + 1e-8)
    np.testing.assert_allclose(last, np.clip(expected, -10, 10), rtol=1e-4, atol=1e-4)


def test_masked_cartpole_hides_the_velocities():
    env = envs.make("heron:CartPole-masked-v1", num_envs=2)
    full = envs.make("gymnax:CartPole-v1", num_envs=2)
    assert env.spec.observation_shape == (2,)
    masked_steps = rollout(env, np.zeros((5, 2), np.int32))
    full_steps = rollout(full, np.zeros((5, 2), np.int32))
    for masked, whole in zip(masked_steps, full_steps, strict=True):
        np.testing.assert_allclose(masked.observation, whole.observation[:, [0, 2]], rtol=1e-6)
        np.testing.assert_array_equal(masked.reward, whole.reward)


def test_history_and_normalisation_in_a_training_run(tmp_path):
    from heron.agents import PPOConfig
    from heron.api import build, train
    from heron.training import RunConfig

    run = RunConfig(
        steps=1024,
        num_envs=4,
        n_evals=2,
        eval_every_n=8,
        len_history_for_policy=4,
        normalize_observations=True,
        reward_scale=0.5,
    )
    setup = build("ppo", PPOConfig(unroll_length=16, batch_size=32), run)
    assert setup.agent.spec.observation_shape == (4, 4)
    summary = train(setup, str(tmp_path / "run"))
    assert summary["final_eval_return"] >= 8  # CartPole returns, unscaled


def _sb3_reward_normalisation(step_type, reward, discount):
    """Plain loops, SB3's VecNormalize(norm_reward=True) in heron's step layout: each
    environment's return ret = ret * discount + r (0 at FIRST steps, which do not count),
    Chan's update of the returns' mean and variance per step; the last step's rewards
    divided by the final standard deviation and clipped to +-10."""
    steps, envs_ = reward.shape
    returns = np.zeros(envs_)
    count, mean, var = 0.0, 0.0, 1.0
    for t in range(steps):
        batch = []
        for b in range(envs_):
            if step_type[t, b] == StepType.FIRST:
                returns[b] = 0.0
            else:
                returns[b] = returns[b] * discount + reward[t, b]
                batch.append(returns[b])
        if batch:
            n, batch_mean, batch_var = len(batch), np.mean(batch), np.var(batch)
            total = count + n
            delta = batch_mean - mean
            m2 = var * count + batch_var * n + delta**2 * count * n / total
            count, mean, var = total, mean + delta * n / total, m2 / total
    normalised = np.clip(reward[-1] / np.sqrt(var + 1e-8), -10, 10)
    return count, mean, var, normalised


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000), envs_=st.integers(1, 4), discount=st.sampled_from([0.0, 0.9, 0.99])
)
def test_reward_normalisation_matches_sb3s_plain_loop(seed, envs_, discount):
    rng = np.random.default_rng(seed)
    steps = 30
    step_type = rng.choice(
        [StepType.FIRST, StepType.MID, StepType.MID, StepType.LAST], (steps, envs_)
    )
    reward = np.where(step_type == StepType.FIRST, 0.0, rng.normal(2.0, 3.0, (steps, envs_)))
    reward = reward.astype(np.float32)
    spec = envs.make("gymnax:CartPole-v1").spec
    pipeline = ObservationPipeline(spec, normalize_rewards=True, discount=discount)
    state = pipeline.init(envs_)
    observation = jnp.zeros((envs_, 4), jnp.float32)
    for t in range(steps):
        raw = TimeStep(
            jnp.asarray(step_type[t]), jnp.asarray(reward[t]), jnp.ones(envs_), observation
        )
        state, seen = pipeline.apply(state, raw, update_stats=True)
    count, mean, var, normalised = _sb3_reward_normalisation(step_type, reward, discount)
    assert float(state.returns.stats.count) == count
    np.testing.assert_allclose(state.returns.stats.mean, mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.returns.stats.var, var, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(seen.reward, normalised, rtol=1e-3, atol=1e-4)
    frozen, again = pipeline.apply(state, raw, update_stats=False)  # evaluation: frozen
    assert jax.tree.all(jax.tree.map(np.array_equal, frozen.returns, state.returns))
    np.testing.assert_allclose(again.reward, seen.reward)


def test_reward_normalisation_is_refused_with_a_reward_scale_or_a_dataset():
    with pytest.raises(ConfigError, match="reward_scale=0.1 would be undone by normalize_rewards"):
        RunConfig(normalize_rewards=True, reward_scale=0.1)
    with pytest.raises(ConfigError, match="an offline run learns from the dataset's rewards"):
        RunConfig(normalize_rewards=True, dataset="data")
