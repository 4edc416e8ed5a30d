"""Replayers: uniform (rings, valid starts, uniform sampling), cycle_one_time (FIFO, consumed
once) and make_replay, each checked against a plain-Python reference."""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.replay import (
    REPLAYERS,
    CycleOneTimeReplay,
    OneTimeReplay,
    ReplayError,
    UniformReplay,
    UnknownReplayError,
    make_replay,
)
from heron.types import Experience, StepType

ENV_STRIDE = 100_000  # step ids: env * ENV_STRIDE + t, t = 1, 2, ... (0 = never written)

# --------------------------------------------------------------------------- uniform helpers


def steps(num_envs: int, first_t: int, num_steps: int) -> dict:
    """Experience [num_envs, num_steps] whose ``id`` names env and time (t from first_t)."""
    t = first_t + np.arange(num_steps)
    ids = np.arange(num_envs)[:, None] * ENV_STRIDE + t[None, :]
    return {
        "id": jnp.asarray(ids, jnp.int32),
        "obs": jnp.asarray(np.stack([ids, -ids], -1), jnp.float32),  # [B, T, 2]
    }


@functools.cache
def uniform_fns(capacity: int, num_envs: int):
    """(replay, jitted add, jitted sample): jax compiles each once per shape."""
    replay = UniformReplay(capacity, num_envs)
    return replay, jax.jit(replay.add), jax.jit(replay.sample, static_argnums=(2, 3))


class RefRing:
    """Plain-Python reference: one deque of step ids per env."""

    def __init__(self, capacity: int, num_envs: int):
        self.rings = [collections.deque(maxlen=capacity) for _ in range(num_envs)]

    def add(self, ids: np.ndarray) -> None:  # ids [B, T]
        for ring, row in zip(self.rings, ids, strict=True):
            ring.extend(int(i) for i in row)

    def windows(self, length: int) -> set[tuple[int, ...]]:
        """Every valid sequence of ``length`` ids."""
        return {
            tuple(list(ring)[j : j + length])
            for ring in self.rings
            for j in range(len(ring) - length + 1)
        }


def fill(capacity: int, num_envs: int, adds: list[int]):
    """Adds of the given T on a fresh replay and on the reference: (state, reference, written)."""
    replay, add, _ = uniform_fns(capacity, num_envs)
    ref = RefRing(capacity, num_envs)
    state, written = None, 0
    for num_steps in adds:
        chunk = steps(num_envs, written + 1, num_steps)
        state = replay.init(chunk) if state is None else state
        state = add(state, chunk)
        ref.add(np.asarray(chunk["id"]))
        written += num_steps
    return state, ref, written


# --------------------------------------------------------------------------- uniform


def test_uniform_add_wraps_and_keeps_the_newest():
    replay = UniformReplay(capacity=4, num_envs=2)
    state = replay.init(steps(2, 1, 3))
    state = replay.add(state, steps(2, 1, 3))
    assert int(replay.size(state)) == 3 and int(state.head) == 3
    state = replay.add(state, steps(2, 4, 3))  # 6 written, capacity 4: ids 3..6 live
    assert int(replay.size(state)) == 4 and int(state.head) == 2
    np.testing.assert_array_equal(state.data["id"][0], [5, 6, 3, 4])  # ring layout
    everything = replay.replay_all(state)
    np.testing.assert_array_equal(
        everything["id"], [[3, 4, 5, 6], [ENV_STRIDE + t for t in (3, 4, 5, 6)]]
    )
    assert everything["obs"].shape == (2, 4, 2)
    assert int(replay.num_valid_starts(state, 3)) == 2 * 2
    assert int(replay.num_valid_starts(state, 5)) == 0


def test_uniform_add_longer_than_capacity_keeps_the_last_steps():
    replay = UniformReplay(capacity=3, num_envs=1)
    state = replay.init(steps(1, 1, 2))
    state = replay.add(state, steps(1, 1, 2))
    state = replay.add(state, steps(1, 3, 7))  # ids 3..9, only 7, 8, 9 survive
    np.testing.assert_array_equal(replay.replay_all(state)["id"], [[7, 8, 9]])
    assert int(state.head) == (2 + 7) % 3


def test_uniform_sample_never_spans_the_write_head():
    # capacity 5, 7 steps written: ring = [6, 7, 3, 4, 5], head at slot 2 (between 7 and 3).
    replay = UniformReplay(capacity=5, num_envs=1)
    state = replay.init(steps(1, 1, 7))
    state = replay.add(state, steps(1, 1, 7))
    batch = jax.jit(replay.sample, static_argnums=(2, 3))(state, jax.random.key(0), 500, 3)
    seen = {tuple(row) for row in np.asarray(batch["id"]).tolist()}
    assert seen == {(3, 4, 5), (4, 5, 6), (5, 6, 7)}  # (6, 7, 3) and (7, 3, 4) never


def test_uniform_sample_reads_only_written_slots():
    replay = UniformReplay(capacity=10, num_envs=2)
    state = replay.init(steps(2, 1, 4))
    state = replay.add(state, steps(2, 1, 4))  # slots 4..9 still unwritten (id 0)
    batch = replay.sample(state, jax.random.key(1), 300, 4)
    ids = np.asarray(batch["id"])
    assert (ids % ENV_STRIDE > 0).all()
    assert {tuple(r) for r in ids.tolist()} == {(1, 2, 3, 4), tuple(ENV_STRIDE + np.arange(1, 5))}


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.sampled_from([3, 8]),
    num_envs=st.sampled_from([1, 3]),
    adds=st.lists(st.sampled_from([1, 4, 11]), min_size=1, max_size=6),
    length=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**16),
)
def test_uniform_property_samples_are_live_contiguous_and_match_reference(
    capacity, num_envs, adds, length, seed
):
    batch = 64
    state, ref, written = fill(capacity, num_envs, adds)
    replay, _, sample = uniform_fns(capacity, num_envs)
    stored = min(written, capacity)
    assert int(replay.size(state)) == stored
    # Contents agree with the reference ring, oldest first.
    everything = replay.replay_all(state)
    np.testing.assert_array_equal(everything["id"], np.array([list(r) for r in ref.rings]))
    np.testing.assert_array_equal(everything["obs"][..., 0], everything["id"])
    assert int(replay.num_valid_starts(state, length)) == num_envs * max(stored - length + 1, 0)
    if length > stored:
        with pytest.raises(ReplayError):
            replay.check_can_sample(state, 1, length)
        return
    ids = np.asarray(sample(state, jax.random.key(seed), batch, length)["id"])  # [batch, length]
    assert ids.shape == (batch, length)
    env, t = ids // ENV_STRIDE, ids % ENV_STRIDE
    assert (env == env[:, :1]).all()  # one env per sequence
    assert (np.diff(t, axis=1) == 1).all()  # contiguous in time, never across the head
    assert (t >= 1).all() and (t <= written).all()  # written
    assert (t > written - capacity).all()  # still live
    assert {tuple(r) for r in ids.tolist()} <= ref.windows(length)


def chi_square_p_value(counts: np.ndarray) -> tuple[float, float | None]:
    """Pearson's statistic against equal frequencies, and its p-value when scipy is here."""
    expected = counts.sum() / counts.size
    statistic = float(((counts - expected) ** 2 / expected).sum())
    try:
        from scipy import stats
    except ImportError:
        return statistic, None
    return statistic, float(stats.chi2.sf(statistic, counts.size - 1))


def test_uniform_starts_are_uniform_over_valid_starts():
    # capacity 10, 13 steps written per env: t = 4..13 live, head mid-ring; length 4 gives
    # starts t = 4..10 in each of 3 envs, 21 valid starts.
    num_envs, capacity, length, draws = 3, 10, 4, 21 * 400
    replay = UniformReplay(capacity, num_envs)
    state = replay.init(steps(num_envs, 1, 13))
    state = replay.add(state, steps(num_envs, 1, 13))
    assert int(replay.num_valid_starts(state, length)) == 21
    replay.check_can_sample(state, 7, length)
    ids = np.asarray(replay.sample(state, jax.random.key(2024), draws, length)["id"])
    env, start = ids[:, 0] // ENV_STRIDE, ids[:, 0] % ENV_STRIDE
    assert set(start.tolist()) == set(range(4, 11))  # every valid start, nothing else
    counts = np.zeros((num_envs, 7))
    np.add.at(counts, (env, start - 4), 1)
    statistic, p_value = chi_square_p_value(counts.ravel())
    critical_df20_p001 = 45.31  # chi-square, 20 degrees of freedom, upper 0.1%
    assert statistic < critical_df20_p001, (statistic, counts)
    if p_value is not None:
        assert p_value > 1e-3


def test_uniform_works_on_experience_and_under_vmap():
    example = Experience(
        step_type=jnp.zeros((2, 3), jnp.int32),
        reward=jnp.zeros((2, 3)),
        discount=jnp.ones((2, 3)),
        observation=jnp.zeros((2, 3, 4)),
        action=jnp.zeros((2, 3), jnp.int32),
    )
    replay = UniformReplay(capacity=6, num_envs=2)
    first = example._replace(step_type=jnp.full((2, 3), StepType.FIRST, jnp.int32))

    def run(key):
        state = replay.add(replay.init(example), first)
        return replay.sample(state, key, 5, 2), state

    batch, state = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 4))
    assert batch.observation.shape == (4, 5, 2, 4) and batch.extras == ()
    assert (batch.step_type == StepType.FIRST).all()
    replay.check_can_sample(state, 3, 2)  # vmapped state: judged per seed
    with pytest.raises(ReplayError, match="length 4"):
        replay.check_can_sample(state, 1, 4)


def test_uniform_clear_forgets():
    replay = UniformReplay(capacity=4, num_envs=1)
    state = replay.add(replay.init(steps(1, 1, 3)), steps(1, 1, 3))
    state = replay.clear(state)
    assert int(replay.size(state)) == 0
    assert replay.replay_all(state)["id"].shape == (1, 0)
    state = replay.add(state, steps(1, 10, 2))
    np.testing.assert_array_equal(replay.replay_all(state)["id"], [[10, 11]])


def test_uniform_check_can_sample_errors_name_the_numbers():
    replay = UniformReplay(capacity=8, num_envs=2)
    state = replay.init(steps(2, 1, 3))
    state = replay.add(state, steps(2, 1, 3))  # 3 per env, 6 transitions
    replay.check_can_sample(state, 2, 3)  # 6 transitions asked, 6 held: fine
    replay.check_can_sample(state, 6, 1, min_replay_size=6)
    with pytest.raises(ReplayError, match=r"length 4.*3 steps per env x 2 envs = 6"):
        replay.check_can_sample(state, 1, 4)
    with pytest.raises(ReplayError, match=r"capacity is 8"):
        replay.check_can_sample(state, 1, 9)
    with pytest.raises(ReplayError, match=r"min_replay_size=7"):
        replay.check_can_sample(state, 1, 1, min_replay_size=7)
    with pytest.raises(ReplayError, match=r"4 x 2 = 8 transitions is larger than the filled"):
        replay.check_can_sample(state, 4, 2)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ReplayError, match="batch_size must be a positive int"):
            replay.check_can_sample(state, bad, 1)
    with pytest.raises(ReplayError, match="length must be a positive int"):
        replay.check_can_sample(state, 1, 0)
    with pytest.raises(ReplayError, match="min_replay_size"):
        replay.check_can_sample(state, 1, 1, min_replay_size=-1)
    empty = replay.clear(state)
    with pytest.raises(ReplayError, match="0 steps per env"):
        replay.check_can_sample(empty, 1, 1)


def test_uniform_validates_config_and_shapes():
    for kwargs in ({"capacity": 0, "num_envs": 1}, {"capacity": 4, "num_envs": 1.5}):
        with pytest.raises(ReplayError, match="must be a positive int"):
            UniformReplay(**kwargs)
    replay = UniformReplay(capacity=4, num_envs=2)
    with pytest.raises(ReplayError, match="3 environments.*num_envs=2"):
        replay.init(steps(3, 1, 2))
    state = replay.init(steps(2, 1, 2))
    with pytest.raises(ReplayError, match="3 environments"):
        replay.add(state, steps(3, 1, 2))
    with pytest.raises(ReplayError, match=r"\[B, T, \.\.\.\]"):
        replay.add(state, {"id": jnp.zeros((2, 3)), "x": jnp.zeros((2, 4))})


# --------------------------------------------------------------------------- cycle_one_time


def unroll(uid: int, envs: int, length: int) -> dict:
    """An unroll [envs, length] tagged with its serial ``uid`` and each entry's position."""
    pos = np.arange(envs * length).reshape(envs, length)
    return {"uid": jnp.full((envs, length), uid, jnp.int32), "pos": jnp.asarray(pos, jnp.int32)}


@functools.cache
def cycle_fns(num_actors: int, unroll_length: int, cap: int, envs: int):
    replay = CycleOneTimeReplay(num_actors, unroll_length, cap, envs)
    return replay, jax.jit(replay.add), jax.jit(replay.sample)


@settings(max_examples=40, deadline=None)
@given(
    config=st.sampled_from([(1, 1, 1, 1), (3, 2, 2, 1), (4, 3, 3, 2), (4, 1, 1, 2)]),
    ops=st.lists(st.one_of(st.integers(0, 3), st.just("sample")), max_size=30),
)
def test_cycle_property_fifo_each_unroll_consumed_once(config, ops):
    num_actors, unroll_length, cap, envs = config
    replay, add, sample = cycle_fns(num_actors, unroll_length, cap, envs)
    state = replay.init(unroll(0, envs, unroll_length))
    queue: collections.deque[tuple[int, int]] = collections.deque()  # (uid, actor) FIFO
    consumed: list[int] = []
    accepted, refused = [], 0
    for uid, op in enumerate(ops, start=1):
        if op == "sample":
            if len(queue) < cap:
                with pytest.raises(ReplayError, match=f"learn_queue_cap={cap}"):
                    replay.check_can_sample(state)
                assert not bool(replay.is_ready(state))
                continue
            replay.check_can_sample(state)
            batch, state = sample(state)
            expected = [queue.popleft()[0] for _ in range(cap)]
            uids = np.asarray(batch["uid"]).reshape(cap, envs, unroll_length)
            np.testing.assert_array_equal(
                uids, np.broadcast_to(np.array(expected)[:, None, None], uids.shape)
            )
            pos = np.arange(envs * unroll_length).reshape(envs, unroll_length)
            np.testing.assert_array_equal(batch["pos"], np.tile(pos, (cap, 1)))
            consumed.extend(expected)
            continue
        actor = op % num_actors
        busy = any(a == actor for _, a in queue)
        assert bool(replay.can_add(state, actor)) == (not busy)
        if busy:
            with pytest.raises(ReplayError, match=f"actor {actor}'s previous unroll"):
                replay.check_can_add(state, actor)
            refused += 1
        else:
            replay.check_can_add(state, actor)
            queue.append((uid, actor))
            accepted.append(uid)
        state = add(state, unroll(uid, envs, unroll_length), actor)  # traced actor_id
    assert int(replay.num_waiting(state)) == len(queue)
    assert int(state.refused) == refused
    assert int(state.next_arrival) == len(accepted)
    # Consumed in arrival order, each once; the rest still waits.
    assert consumed == accepted[: len(consumed)]
    assert sorted(uid for uid, _ in queue) == accepted[len(consumed) :]


def test_cycle_sample_layout_and_refusal():
    replay = CycleOneTimeReplay(num_actors=3, unroll_length=2, learn_queue_cap=2, envs_per_actor=2)
    state = replay.init(unroll(0, 2, 2))
    with pytest.raises(ReplayError, match=r"only 0 complete unroll\(s\) waiting"):
        replay.check_can_sample(state)
    state = replay.add(state, unroll(7, 2, 2), 2)
    with pytest.raises(ReplayError, match=r"only 1 complete.*learn_queue_cap=2"):
        replay.check_can_sample(state)
    state = replay.add(state, unroll(8, 2, 2), 2)  # actor 2 again: refused, 7 is kept
    assert int(state.refused) == 1
    state = replay.add(state, unroll(9, 2, 2), 0)
    np.testing.assert_array_equal(replay.next_actors(state), [2, 0])
    batch, state = replay.sample(state)
    assert batch["uid"].shape == (4, 2)  # [learn_queue_cap x envs_per_actor, unroll_length]
    np.testing.assert_array_equal(batch["uid"][:, 0], [7, 7, 9, 9])
    np.testing.assert_array_equal(batch["pos"], [[0, 1], [2, 3], [0, 1], [2, 3]])
    assert int(replay.num_waiting(state)) == 0
    state = replay.clear(replay.add(state, unroll(10, 2, 2), 1))
    assert int(replay.num_waiting(state)) == 0


def test_cycle_validates_config_actor_and_shapes():
    with pytest.raises(ReplayError, match="learn_queue_cap=3 must be <= num_actors=2"):
        CycleOneTimeReplay(num_actors=2, unroll_length=4, learn_queue_cap=3)
    for bad in (
        {"num_actors": 0},
        {"unroll_length": -2},
        {"learn_queue_cap": 1.0},
        {"envs_per_actor": True},
    ):
        kwargs = {"num_actors": 2, "unroll_length": 4, "learn_queue_cap": 1, **bad}
        with pytest.raises(ReplayError, match=f"{next(iter(bad))} must be a positive int"):
            CycleOneTimeReplay(**kwargs)
    replay = CycleOneTimeReplay(num_actors=2, unroll_length=4, learn_queue_cap=1)
    state = replay.init(unroll(0, 1, 4))
    with pytest.raises(ReplayError, match=r"actor_id must be in \[0, 2\), got 2"):
        replay.add(state, unroll(1, 1, 4), 2)
    with pytest.raises(ReplayError, match="actor_id"):
        replay.check_can_add(state, -1)
    with pytest.raises(ReplayError, match=r"\[1, 3, \.\.\.\].*\[1, 4, \.\.\.\]"):
        replay.add(state, unroll(1, 1, 3), 0)


# --------------------------------------------------------------------------- make_replay


def test_make_replay_names():
    assert REPLAYERS == ("one_time", "uniform", "cycle_one_time")
    assert isinstance(make_replay("one_time"), OneTimeReplay)
    assert make_replay("uniform", capacity=10, num_envs=2) == UniformReplay(10, 2)
    cycle = make_replay("cycle_one_time", num_actors=2, unroll_length=3, learn_queue_cap=1)
    assert cycle == CycleOneTimeReplay(2, 3, 1, 1)
    with pytest.raises(ReplayError, match="'uniform'.*num_envs"):
        make_replay("uniform", capacity=10)


def test_make_replay_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownReplayError) as info:
        make_replay("prioritized")
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "'prioritized'" in message
    assert all(name in message for name in ("one_time", "uniform", "cycle_one_time"))
