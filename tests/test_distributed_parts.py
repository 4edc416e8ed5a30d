"""The pure parts of heron.distributed and of the driver's per-actor path, against plain
references (no Ray needed): actor keys, merging the actors' observation and episode
statistics, and adding several actors' unrolls to a replay."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.distributed.source import (
    ActorSteps,
    actor_keys,
    add_actor_steps,
    join_episodes,
    merge_stats,
)
from heron.envs.wrappers import RunningStats
from heron.replay import CycleOneTimeReplay
from heron.training.sources import EpisodeStats, Source
from heron.types import StepType, TimeStep


def test_actor_zero_acts_with_the_key_itself_and_the_others_with_it_folded():
    key = jax.random.PRNGKey(7)
    keys = actor_keys(key, 3)
    assert (keys[0] == key).all()
    for a in (1, 2):
        assert (keys[a] == jax.random.fold_in(key, a)).all()
    assert len({tuple(np.asarray(k)) for k in keys}) == 3


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    batches=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_merged_actor_statistics_are_those_of_all_their_observations(sizes, batches, seed):
    rng = np.random.default_rng(seed)
    per_actor = [rng.normal(3.0, 2.0, (batches, size, 2)).astype(np.float32) for size in sizes]
    stats = []
    for observations in per_actor:
        running = RunningStats.zeros((2,))
        for batch in observations:
            running = running.update(jnp.asarray(batch))
        stats.append(running)
    merged = merge_stats(jax.tree.map(lambda *xs: jnp.stack(xs), *stats))
    everything = np.concatenate([o.reshape(-1, 2) for o in per_actor]).astype(np.float64)
    assert float(merged.count) == everything.shape[0]
    np.testing.assert_allclose(merged.mean, everything.mean(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(merged.var, everything.var(axis=0), rtol=1e-3, atol=1e-4)


def test_one_actors_statistics_are_kept_exactly():
    one = RunningStats(jnp.float32(3.0), jnp.array([0.1, 0.7]), jnp.array([1.3, 0.2]))
    merged = merge_stats(jax.tree.map(lambda x: x[None], one))
    for ours, theirs in zip(merged, one, strict=True):
        assert (ours == theirs).all()


def _timestep(step_type, reward):
    n = len(step_type)
    return TimeStep(
        jnp.asarray(step_type, jnp.int32),
        jnp.asarray(reward, jnp.float32),
        jnp.ones(n, jnp.float32),
        jnp.zeros((n, 1), jnp.float32),
    )


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_joined_episode_statistics_equal_those_of_one_source_of_all_environments(data):
    actors, per_actor, steps = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), 6
    n = actors * per_actor
    kinds = st.sampled_from([StepType.FIRST, StepType.MID, StepType.LAST])
    types = data.draw(st.lists(st.lists(kinds, min_size=n, max_size=n), min_size=steps,
                               max_size=steps))  # fmt: skip
    rewards = np.arange(steps * n, dtype=np.float32).reshape(steps, n) / 7
    whole = EpisodeStats.zeros(n)
    parts = [EpisodeStats.zeros(per_actor) for _ in range(actors)]
    for t in range(steps):
        whole = whole.update(_timestep(types[t], rewards[t]))
        for a in range(actors):
            lanes = slice(a * per_actor, (a + 1) * per_actor)
            parts[a] = parts[a].update(_timestep(types[t][lanes], rewards[t][lanes]))
    joined = join_episodes(jax.tree.map(lambda *xs: jnp.stack(xs), *parts))
    for ours, theirs in zip(joined, whole, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_actor_steps_enter_the_replay_as_one_add_per_actor_in_order():
    replay = CycleOneTimeReplay(num_actors=3, envs_per_actor=2, unroll_length=2,
                                learn_queue_cap=2)  # fmt: skip
    steps = {"x": jnp.arange(2 * 2 * 2, dtype=jnp.float32).reshape(2, 2, 2)}  # [U, n, T]
    actors = jnp.array([2, 0], jnp.int32)
    state = replay.init(jax.tree.map(lambda x: x[0][:, 0], steps))
    ours = jax.jit(lambda s: add_actor_steps(replay, s, ActorSteps(steps, actors)))(state)
    reference = state
    for u, actor in enumerate([2, 0]):  # the plain loop
        reference = replay.add(reference, {"x": steps["x"][u]}, actor)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference), strict=True):
        assert (a == b).all()
    batch, _ = replay.sample(ours, jax.random.PRNGKey(0))
    # Actor 2's unroll arrived first: the sample takes it first.
    np.testing.assert_array_equal(batch["x"][:2, 1:], steps["x"][0])
    np.testing.assert_array_equal(batch["x"][2:, 1:], steps["x"][1])


def test_plain_steps_enter_the_replay_as_one_add():
    replay = CycleOneTimeReplay(num_actors=1, envs_per_actor=2, unroll_length=2,
                                learn_queue_cap=1)  # fmt: skip
    steps = {"x": jnp.ones((2, 2))}
    state = replay.init(jax.tree.map(lambda x: x[:, 0], steps))
    ours = Source.add(None, replay, state, steps)  # the protocol's own: one add of every lane
    reference = replay.add(state, steps)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference), strict=True):
        assert (a == b).all()


def test_actors_record_their_steps_with_the_learners_pipeline():
    """The actors' processes build their pipeline from the learner's, every setting kept
    (reward normalisation was left out once, and a run with --actors and
    --normalize-rewards failed in its first iteration)."""
    import dataclasses

    from heron.agents import PPOConfig
    from heron.api import build
    from heron.run_config import RunConfig

    run = RunConfig(
        env="gymnax:Pendulum-v1",
        actors=2,
        num_envs=8,
        normalize_observations=True,
        normalize_rewards=True,
        len_history_for_policy=2,
    )
    source = build("ppo", PPOConfig(discount=0.9), run).source
    spec = source.pool.actors.spec
    learner = source.pipeline
    assert dataclasses.replace(spec.pipeline, env_spec=learner.env_spec) == learner
    assert (spec.pipeline.normalize_rewards, spec.pipeline.discount) == (True, 0.9)
