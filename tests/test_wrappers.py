import jax.numpy as jnp
import numpy as np
from conftest import TIME_LIMIT, rollout
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import envs
from heron.envs.wrappers import ObservationPipeline, RunningStats


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
