"""Replayers behind one protocol (init, add, can_sample, sample): uniform (rings, valid
starts, uniform sampling, rate limiting), one_time (the last unroll and the step before it,
once), cycle_one_time (FIFO across actors, each unroll once), each checked against a
plain-Python reference."""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from heron.replay import (
    REPLAYERS,
    CycleOneTimeReplay,
    OneTimeReplay,
    ReplayError,
    ReplaySizes,
    UniformReplay,
    UnknownReplayError,
    make_replay,
)
from heron.types import Experience, StepType

ENV_STRIDE = 100_000  # step ids: env * ENV_STRIDE + t, t = 1, 2, ... (0 = never written)


def steps(num_envs: int, first_t: int, num_steps: int) -> dict:
    """Steps [num_envs, num_steps] whose ``id`` names env and time (t from first_t)."""
    t = first_t + np.arange(num_steps)
    ids = np.arange(num_envs)[:, None] * ENV_STRIDE + t[None, :]
    return {
        "id": jnp.asarray(ids, jnp.int32),
        "obs": jnp.asarray(np.stack([ids, -ids], -1), jnp.float32),  # [B, T, 2]
    }


def one_step(num_envs: int) -> dict:
    return jax.tree.map(lambda x: x[:, 0], steps(num_envs, 1, 1))


def stored(replay: UniformReplay, state) -> np.ndarray:
    """The ids held per lane, oldest first (the test's view of the rings)."""
    size, head = int(state.size), int(state.head)
    slots = (head - size + np.arange(size)) % replay.capacity
    return np.asarray(state.data["id"])[:, slots]


# --------------------------------------------------------------------------- uniform


@functools.cache
def uniform_fns(capacity: int, num_envs: int, batch_size: int = 64, length: int = 1):
    """(replay, jitted add, jitted sample): compiled once per shape."""
    replay = UniformReplay(num_envs, capacity, batch_size, length)
    return replay, jax.jit(replay.add), jax.jit(replay.sample)


class RefRing:
    """Plain-Python reference: one deque of step ids per env."""

    def __init__(self, capacity: int, num_envs: int):
        self.rings = [collections.deque(maxlen=capacity) for _ in range(num_envs)]

    def add(self, ids: np.ndarray) -> None:  # ids [B, T]
        for ring, row in zip(self.rings, ids, strict=True):
            ring.extend(int(i) for i in row)

    def windows(self, length: int) -> set[tuple[int, ...]]:
        return {
            tuple(list(ring)[j : j + length])
            for ring in self.rings
            for j in range(len(ring) - length + 1)
        }


def test_uniform_add_wraps_and_keeps_the_newest():
    replay = UniformReplay(num_envs=2, capacity=4, batch_size=1, sequence_length=3)
    state = replay.init(one_step(2))
    state = replay.add(state, steps(2, 1, 3))
    assert int(state.size) == 3 and int(state.head) == 3
    state = replay.add(state, steps(2, 4, 3))  # 6 written, capacity 4: ids 3..6 live
    assert int(state.size) == 4 and int(state.head) == 2
    np.testing.assert_array_equal(state.data["id"][0], [5, 6, 3, 4])  # ring layout
    np.testing.assert_array_equal(
        stored(replay, state), [[3, 4, 5, 6], [ENV_STRIDE + t for t in (3, 4, 5, 6)]]
    )
    assert int(replay.num_valid_starts(state)) == 2 * 2


def test_uniform_add_longer_than_capacity_keeps_the_last_steps():
    replay = UniformReplay(num_envs=1, capacity=3, batch_size=1, sequence_length=1)
    state = replay.add(replay.init(one_step(1)), steps(1, 1, 2))
    state = replay.add(state, steps(1, 3, 7))  # ids 3..9, only 7, 8, 9 survive
    np.testing.assert_array_equal(stored(replay, state), [[7, 8, 9]])
    assert int(state.head) == (2 + 7) % 3


def test_uniform_sample_never_spans_the_write_head():
    # capacity 5, 7 steps written: ring = [6, 7, 3, 4, 5], head at slot 2 (between 7 and 3).
    replay, add, sample = uniform_fns(5, 1, 500, 3)
    state = add(replay.init(one_step(1)), steps(1, 1, 7))
    batch, _ = sample(state, jax.random.key(0))
    seen = {tuple(row) for row in np.asarray(batch["id"]).tolist()}
    assert seen == {(3, 4, 5), (4, 5, 6), (5, 6, 7)}  # (6, 7, 3) and (7, 3, 4) never


def test_uniform_sample_reads_only_written_slots():
    replay, add, sample = uniform_fns(10, 2, 300, 4)
    state = add(replay.init(one_step(2)), steps(2, 1, 4))  # slots 4..9 still unwritten
    ids = np.asarray(sample(state, jax.random.key(1))[0]["id"])
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
    replay, add, sample = uniform_fns(capacity, num_envs, 64, length)
    reference = RefRing(capacity, num_envs)
    state, written = replay.init(one_step(num_envs)), 0
    for num_steps in adds:
        chunk = steps(num_envs, written + 1, num_steps)
        state = add(state, chunk)
        reference.add(np.asarray(chunk["id"]))
        written += num_steps
    kept = min(written, capacity)
    assert int(state.size) == kept
    np.testing.assert_array_equal(stored(replay, state), [list(r) for r in reference.rings])
    assert int(replay.num_valid_starts(state)) == num_envs * max(kept - length + 1, 0)
    assert bool(replay.can_sample(state)) == (kept >= length)
    if kept < length:
        return
    ids = np.asarray(sample(state, jax.random.key(seed))[0]["id"])  # [batch, length]
    assert ids.shape == (64, length)
    env, t = ids // ENV_STRIDE, ids % ENV_STRIDE
    assert (env == env[:, :1]).all()  # one env per sequence
    assert (np.diff(t, axis=1) == 1).all()  # contiguous in time, never across the head
    assert (t >= 1).all() and (t <= written).all()  # written
    assert (t > written - capacity).all()  # still live
    assert {tuple(r) for r in ids.tolist()} <= reference.windows(length)


def test_uniform_starts_are_uniform_over_valid_starts():
    # capacity 10, 13 steps written per env: t = 4..13 live; length 4 gives starts
    # t = 4..10 in each of 3 envs, 21 valid starts.
    num_envs, capacity, length, draws = 3, 10, 4, 21 * 400
    replay, add, sample = uniform_fns(capacity, num_envs, draws, length)
    state = add(replay.init(one_step(num_envs)), steps(num_envs, 1, 13))
    assert int(replay.num_valid_starts(state)) == 21
    ids = np.asarray(sample(state, jax.random.key(2024))[0]["id"])
    env, start = ids[:, 0] // ENV_STRIDE, ids[:, 0] % ENV_STRIDE
    assert set(start.tolist()) == set(range(4, 11))  # every valid start, nothing else
    counts = np.zeros((num_envs, 7))
    np.add.at(counts, (env, start - 4), 1)
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3


@settings(max_examples=40, deadline=None)
@given(
    ratio=st.sampled_from([0.05, 0.25, 0.5, 1.0, 2.0]),
    min_size=st.sampled_from([0, 5, 24]),
    adds=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=10),
)
def test_uniform_rate_limit_matches_a_counting_reference(ratio, min_size, adds):
    """Once min_size steps are stored, every step added earns ``ratio`` samples; the learner
    takes every whole sample earned (a plain float counter is the reference)."""
    num_envs = 4
    replay = UniformReplay(num_envs, 50, 2, 1, min_size=min_size, ratio=ratio)
    add, sample = jax.jit(replay.add), jax.jit(replay.sample)
    state, size, credit, taken = replay.init(one_step(num_envs)), 0, 0.0, []
    for t, num_steps in enumerate(adds):
        state = add(state, steps(num_envs, 1 + t * 3, num_steps))
        size += num_steps
        if size * num_envs >= min_size:
            credit += ratio * num_steps * num_envs
        count = 0
        while bool(replay.can_sample(state)):
            _, state = sample(state, jax.random.key(t))
            count += 1
        expected = int(np.floor(credit + 1e-6))
        credit -= expected
        taken.append(count)
        assert count == expected, (taken, ratio, min_size)


def test_uniform_without_a_rate_samples_as_often_as_asked():
    replay = UniformReplay(1, 10, 2, 2)  # ratio None: a fixed dataset
    state = replay.add(replay.init(one_step(1)), steps(1, 1, 5))
    for i in range(20):
        assert bool(replay.can_sample(state))
        _, state = replay.sample(state, jax.random.key(i))


def test_uniform_works_on_experience_and_under_vmap():
    example = Experience(
        step_type=jnp.full((2,), StepType.FIRST, jnp.int32),
        reward=jnp.zeros(2),
        discount=jnp.ones(2),
        observation=jnp.zeros((2, 4)),
        action=jnp.zeros(2, jnp.int32),
    )
    replay = UniformReplay(num_envs=2, capacity=6, batch_size=5, sequence_length=2)
    several = jax.tree.map(lambda x: jnp.repeat(x[:, None], 3, axis=1), example)

    def run(key):
        state = replay.add(replay.init(example), several)
        return replay.sample(state, key)[0]

    batch = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 4))
    assert batch.observation.shape == (4, 5, 2, 4) and batch.extras == ()
    assert (batch.step_type == StepType.FIRST).all()


def test_uniform_validates_config_and_shapes():
    for kwargs in ({"capacity": 0}, {"num_envs": 1.5}, {"batch_size": 0}):
        with pytest.raises(ReplayError, match="must be a positive int"):
            UniformReplay(
                **{"num_envs": 1, "capacity": 4, "batch_size": 1, "sequence_length": 1, **kwargs}
            )
    with pytest.raises(ReplayError, match="sequences of 5 steps can never be sampled"):
        UniformReplay(1, 4, 1, 5)
    with pytest.raises(ReplayError, match="min_size must be >= 0"):
        UniformReplay(1, 4, 1, 1, min_size=-1)
    replay = UniformReplay(2, 4, 1, 1)
    state = replay.init(one_step(2))
    with pytest.raises(ReplayError, match="3 environments.*num_envs=2"):
        replay.add(state, steps(3, 1, 2))
    with pytest.raises(ReplayError, match=r"\[B, T, \.\.\.\]"):
        replay.add(state, {"id": jnp.zeros((2, 3)), "obs": jnp.zeros((2, 4))})


# --------------------------------------------------------------------------- one_time


@settings(max_examples=40, deadline=None)
@given(
    unroll_length=st.sampled_from([1, 3, 5]),
    adds=st.lists(st.sampled_from([1, 3, 5]), min_size=1, max_size=8),
)
def test_one_time_holds_the_last_unroll_and_the_step_before_it(unroll_length, adds):
    replay = OneTimeReplay(num_envs=2, unroll_length=unroll_length)
    state, written, fresh = replay.init(one_step(2)), 0, 0
    window = collections.deque([0] * (unroll_length + 1), maxlen=unroll_length + 1)
    for num_steps in adds:
        state = replay.add(state, steps(2, written + 1, num_steps))
        window.extend(range(written + 1, written + 1 + num_steps))
        written += num_steps
        fresh += num_steps
        assert bool(replay.can_sample(state)) == (fresh >= unroll_length)
        if fresh >= unroll_length:
            batch, state = replay.sample(state, jax.random.key(0))
            np.testing.assert_array_equal(batch["id"][0], list(window))
            np.testing.assert_array_equal(
                batch["id"][1], [i + ENV_STRIDE if i else 0 for i in window]
            )
            assert not bool(replay.can_sample(state))  # consumed once
            fresh = 0


def test_consecutive_unrolls_overlap_by_one_step():
    replay = OneTimeReplay(num_envs=1, unroll_length=3)
    state = replay.add(replay.init(one_step(1)), steps(1, 1, 1))  # the first step acted on
    state = replay.add(state, steps(1, 2, 3))
    first, state = replay.sample(state, None)
    state = replay.add(state, steps(1, 5, 3))
    second, _ = replay.sample(state, None)
    np.testing.assert_array_equal(first["id"], [[1, 2, 3, 4]])
    np.testing.assert_array_equal(second["id"], [[4, 5, 6, 7]])  # step 4 bootstraps the first


# --------------------------------------------------------------------------- cycle_one_time


def actor_steps(uid: int, envs: int, length: int) -> dict:
    """Steps [envs, length] tagged with the unroll's serial ``uid`` and each one's position."""
    pos = np.arange(envs * length).reshape(envs, length)
    return {"uid": jnp.full((envs, length), uid, jnp.int32), "pos": jnp.asarray(pos, jnp.int32)}


@functools.cache
def cycle_fns(num_actors: int, unroll_length: int, cap: int, envs: int):
    replay = CycleOneTimeReplay(num_actors, envs, unroll_length, cap)
    return replay, jax.jit(replay.add), jax.jit(replay.sample), jax.jit(replay.start)


@settings(max_examples=40, deadline=None)
@given(
    config=st.sampled_from([(1, 1, 1, 1), (3, 2, 2, 1), (4, 3, 3, 2), (4, 1, 1, 2)]),
    ops=st.lists(
        st.one_of(
            st.integers(0, 3), st.just("sample"), st.tuples(st.just("start"), st.integers(0, 3))
        ),
        max_size=30,
    ),
)
def test_cycle_property_fifo_each_unroll_consumed_once(config, ops):
    """Each actor adds whole unrolls; the learner takes the oldest complete ones, each once;
    an actor whose unroll still waits is refused (its steps are not written). A step that
    starts a stream (``start``: fresh environments, or a dropped unroll's last step) is never
    an unroll of its own, only the step in front of the actor's next one."""
    num_actors, unroll_length, cap, envs = config
    replay, add, sample, start = cycle_fns(num_actors, unroll_length, cap, envs)
    state = replay.init(jax.tree.map(lambda x: x[:, 0], actor_steps(0, envs, 1)))
    queue: collections.deque[tuple[int, int]] = collections.deque()  # (uid, actor) FIFO
    last = {actor: 0 for actor in range(num_actors)}  # uid of each actor's last accepted
    last_before: dict[int, int] = {}  # uid -> the uid of the step before that unroll
    consumed, accepted, refused = [], [], 0
    for uid, op in enumerate(ops, start=1):
        if op == "sample":
            assert bool(replay.can_sample(state)) == (len(queue) >= cap)
            if len(queue) < cap:
                continue
            batch, state = sample(state, jax.random.key(0))
            taken = [queue.popleft() for _ in range(cap)]
            uids = np.asarray(batch["uid"]).reshape(cap, envs, unroll_length + 1)
            for k, (expected, _) in enumerate(taken):
                np.testing.assert_array_equal(uids[k, :, 1:], expected)
                np.testing.assert_array_equal(uids[k, :, 0], last_before[expected])
            consumed.extend(uid for uid, _ in taken)
            continue
        starts, op = (True, op[1]) if isinstance(op, tuple) else (False, op)
        actor = op % num_actors
        busy = any(a == actor for _, a in queue)
        assert bool(replay.can_add(state, actor)) == (not busy)
        if busy:
            refused += 1
        elif starts:
            last[actor] = uid  # the step in front of the actor's next unroll
        else:
            queue.append((uid, actor))
            accepted.append(uid)
            last_before[uid] = last[actor]  # the step before this unroll: the previous one's last
            last[actor] = uid
        if starts:
            state = start(state, actor_steps(uid, envs, 1), actor)
            continue
        state = add(state, actor_steps(uid, envs, unroll_length), actor)  # traced actor
    assert int(state.refused) == refused
    assert int(state.next_arrival) == len(accepted)
    assert consumed == accepted[: len(consumed)]  # arrival order, each once
    assert sorted(uid for uid, _ in queue) == accepted[len(consumed) :]


def test_cycle_sample_layout_and_refusal():
    replay = CycleOneTimeReplay(num_actors=3, envs_per_actor=2, unroll_length=2, learn_queue_cap=2)
    state = replay.init(jax.tree.map(lambda x: x[:, 0], actor_steps(0, 2, 1)))
    assert not bool(replay.can_sample(state))
    state = replay.add(state, actor_steps(7, 2, 2), 2)
    assert not bool(replay.can_sample(state))
    state = replay.add(state, actor_steps(8, 2, 2), 2)  # actor 2 again: refused, 7 is kept
    assert int(state.refused) == 1
    state = replay.add(state, actor_steps(9, 2, 2), 0)
    np.testing.assert_array_equal(replay.next_actors(state), [2, 0])
    batch, state = replay.sample(state, None)
    assert batch["uid"].shape == (4, 3)  # [learn_queue_cap x envs_per_actor, unroll_length + 1]
    np.testing.assert_array_equal(batch["uid"][:, 1:], [[7, 7], [7, 7], [9, 9], [9, 9]])
    np.testing.assert_array_equal(batch["pos"][:, 1:], [[0, 1], [2, 3], [0, 1], [2, 3]])
    assert not bool(replay.can_sample(state)) and int(jnp.sum(replay.waiting(state))) == 0


def test_cycle_validates_config_actor_and_shapes():
    with pytest.raises(ReplayError, match="learn_queue_cap=3 must be <= num_actors=2"):
        CycleOneTimeReplay(num_actors=2, envs_per_actor=1, unroll_length=4, learn_queue_cap=3)
    for bad in (
        {"num_actors": 0},
        {"unroll_length": -2},
        {"learn_queue_cap": 1.0},
        {"envs_per_actor": True},
    ):
        kwargs = {
            "num_actors": 2,
            "envs_per_actor": 1,
            "unroll_length": 4,
            "learn_queue_cap": 1,
            **bad,
        }
        with pytest.raises(ReplayError, match=f"{next(iter(bad))} must be a positive int"):
            CycleOneTimeReplay(**kwargs)
    replay = CycleOneTimeReplay(num_actors=2, envs_per_actor=1, unroll_length=4, learn_queue_cap=1)
    state = replay.init(jax.tree.map(lambda x: x[:, 0], actor_steps(0, 1, 1)))
    with pytest.raises(ReplayError, match=r"actor must be in \[0, 2\), got 2"):
        replay.add(state, actor_steps(1, 1, 4), 2)
    with pytest.raises(ReplayError, match="2 environments.*num_envs=1"):
        replay.add(state, actor_steps(1, 2, 4), 0)


# --------------------------------------------------------------------------- make_replay


def test_make_replay_names():
    assert REPLAYERS == ("one_time", "uniform", "cycle_one_time")
    sizes = ReplaySizes(num_envs=4, unroll_length=3, batch_size=2, sequence_length=2, capacity=10)
    assert make_replay("one_time", sizes) == OneTimeReplay(4, 3)
    assert make_replay("uniform", sizes) == UniformReplay(4, 10, 2, 2)
    cycle = ReplaySizes(num_envs=4, unroll_length=3, num_actors=2, learn_queue_cap=1)
    assert make_replay("cycle_one_time", cycle) == CycleOneTimeReplay(2, 2, 3, 1)
    with pytest.raises(ReplayError, match="num_envs=4 must be a multiple of num_actors=3"):
        make_replay("cycle_one_time", ReplaySizes(num_envs=4, num_actors=3))


def test_make_replay_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownReplayError) as info:
        make_replay("prioritized", ReplaySizes(num_envs=1))
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "'prioritized'" in message
    assert all(name in message for name in ("one_time", "uniform", "cycle_one_time"))


def _stacked_experience(num_envs, num_steps, history, first_p, rng):
    """Experience [num_envs, num_steps] whose frames are their step ids (env * ENV_STRIDE +
    t), episodes starting where step_type is FIRST (always at t = 1), and observations
    [history, 1] stacked by a plain loop as ObservationPipeline stacks them."""
    ids = np.arange(num_envs)[:, None] * ENV_STRIDE + 1 + np.arange(num_steps)[None]
    first = rng.random((num_envs, num_steps)) < first_p
    first[:, 0] = True
    step_type = np.where(first, StepType.FIRST, StepType.MID).astype(np.int32)
    stacked = np.zeros((num_envs, num_steps, history, 1), np.int32)
    for env in range(num_envs):
        frames = []
        for t in range(num_steps):
            frames = [ids[env, t]] * history if first[env, t] else frames[1:] + [ids[env, t]]
            stacked[env, t, :, 0] = frames
    zeros = np.zeros((num_envs, num_steps), np.float32)
    experience = Experience(
        step_type=step_type, reward=ids.astype(np.float32), discount=zeros,
        observation=stacked, action=ids,
    )  # fmt: skip
    return jax.tree.map(jnp.asarray, experience)


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.sampled_from([6, 9]),
    num_envs=st.sampled_from([1, 2]),
    adds=st.lists(st.sampled_from([1, 3, 7]), min_size=1, max_size=5),
    length=st.sampled_from([1, 2]),
    history=st.sampled_from([2, 4]),
    first_p=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
def test_stacked_frames_are_kept_once_and_stacked_again_as_they_were_added(
    capacity, num_envs, adds, length, history, first_p, seed
):
    """A replay of ``frame_history`` H keeps one frame per step (1/H of the memory) and
    samples every step's stacked observation exactly as it was added, FIRST steps' fills
    included; a sequence needs H - 1 live steps in front of it."""
    rng = np.random.default_rng(seed)
    experience = _stacked_experience(num_envs, sum(adds), history, first_p, rng)
    replay = UniformReplay(num_envs, capacity, 32, length, frame_history=history)
    if length + history - 1 > capacity:
        return
    state = replay.init(jax.tree.map(lambda x: x[:, 0], experience))
    assert state.data.observation.shape == (num_envs, capacity, 1)  # one frame a step
    written = 0
    for num_steps in adds:
        chunk = slice(written, written + num_steps)
        state = replay.add(state, jax.tree.map(lambda x, c=chunk: x[:, c], experience))
        written += num_steps
    kept = min(written, capacity)
    window = length + history - 1
    assert int(replay.num_valid_starts(state)) == num_envs * max(kept - window + 1, 0)
    assert bool(replay.can_sample(state)) == (kept >= window)
    if kept < window:
        return
    batch, _ = replay.sample(state, jax.random.key(seed))
    ids = np.asarray(batch.action)  # [batch, length]: which steps were sampled
    env, t = ids // ENV_STRIDE, ids % ENV_STRIDE - 1  # t: index into the experience
    assert (t >= written - kept + history - 1).all()  # the context in front is live
    expected = np.asarray(experience.observation)[env, t]
    np.testing.assert_array_equal(np.asarray(batch.observation), expected)
    np.testing.assert_array_equal(np.asarray(batch.step_type), experience.step_type[env, t])


def test_a_stacked_replay_too_small_for_its_context_is_refused():
    with pytest.raises(ReplayError, match=r"sequences of 3 steps \(and the 3 in front whose"):
        UniformReplay(1, 5, 4, 3, frame_history=4)
