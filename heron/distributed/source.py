"""Ray actors as a source of experience: ``heron train ALGO --actors A``.

``RaySource`` has the pure ``init`` / ``collect`` / ``restart`` every source has; each
reaches the actors through one host callback into its ``ActorPool`` (``pool.py``), so the
training iteration still compiles whole. Its state, saved in checkpoints with the learner's,
holds every actor's snapshot (environments, observation pipeline, pending step, recurrent
carry, episode statistics: ``EnvSourceState`` leaves [A, ...]) as of the newest unroll the
learner took from it, plus the run's counters.

Synchronous driver: an iteration takes one unroll of every actor, joined in actor order into
the [num_envs, T] batch the in-process source builds, so every agent and replayer works
unchanged. Actor 0 acts with the iteration's collection key itself and actor a > 0 with it
folded with a, so runs repeat exactly and one actor reproduces the in-process run.
Asynchronous driver: an iteration takes the ``learn_queue_cap`` oldest finished unrolls with
their actor ids (``ActorSteps``) into the ``cycle_one_time`` replay, which the learner then
consumes once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from heron.agents.base import Agent
from heron.distributed.pool import ActorPool, Taken
from heron.envs.wrappers import ObservationPipeline, PipelineState, ReturnStats, RunningStats
from heron.run_config import ASYNC, DistConfig
from heron.training.sources import EnvSource, EpisodeStats, Source

_LAGGED_STREAM = 2**31 - 1  # folded into the init key for the first overlapped requests


class RaySourceState(NamedTuple):
    actors: Any  # EnvSourceState, leaves [A, ...]: each actor after its newest unroll taken
    next_unroll: jax.Array  # int32 [A]: index of each actor's next unroll
    taken: jax.Array  # int32 [A]: unrolls of each actor the learner took
    counters: jax.Array  # int32 [3]: actor restarts, unrolls lost, unrolls dropped
    lag: jax.Array  # float32 [3]: the last iteration's policy lag (mean, max); the run's max
    version: jax.Array  # int32 []: parameter versions published so far
    key: jax.Array  # uint32 [2]: the asynchronous requests' keys derive from it
    lagged: Any  # policy lag 1: (agent state, keys [A, 2], version) of the requests in flight


class ActorSteps(NamedTuple):
    """Steps from several actors, in the order the replay takes them."""

    steps: Any  # leaves [U, lanes per actor, T, ...]
    actors: jax.Array  # int32 [U]: the actor that produced each
    leads: Any = None  # leaves [U, lanes per actor, 1, ...]: the step in front of each unroll


def add_actor_steps(replay, replay_state, steps: ActorSteps, first: bool = False):
    """Several actors' unrolls into a replay with a slot per actor, one actor at a time,
    each after the step in front of it (``first``: they begin new streams)."""
    put = replay.start if first else replay.add

    def add_one(replay_state, one):
        actor_steps, actor, lead = one
        if lead is not None:
            replay_state = replay.start(replay_state, lead, actor)
        return put(replay_state, actor_steps, actor), None

    return jax.lax.scan(add_one, replay_state, (steps.steps, steps.actors, steps.leads))[0]


def actor_keys(key, actors: int):
    """[A, 2]: ``key`` for actor 0, ``key`` folded with ``a`` for actor a > 0."""
    return jnp.stack([key] + [jax.random.fold_in(key, a) for a in range(1, actors)])


def merge_stats(stats: RunningStats) -> RunningStats:
    """Running statistics [A] of several actors as one (Chan et al.'s merge); one actor's
    as they are."""
    if stats.count.shape[0] == 1:
        return jax.tree.map(lambda x: x[0], stats)
    count = jnp.sum(stats.count)
    weights = (stats.count / jnp.maximum(count, 1.0)).reshape((-1,) + (1,) * (stats.mean.ndim - 1))
    mean = jnp.sum(weights * stats.mean, axis=0)
    var = jnp.sum(weights * (stats.var + (stats.mean - mean) ** 2), axis=0)
    return RunningStats(count, mean, jnp.where(count > 0, var, jnp.ones_like(var)))


def join_episodes(stats: EpisodeStats) -> EpisodeStats:
    """Several actors' episode statistics as one: per-environment fields [A, n] joined in
    actor order, running totals [A] summed."""
    return jax.tree.map(lambda x: x.reshape(-1) if x.ndim > 1 else jnp.sum(x), stats)


def _stacked(tree, size: int):
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct((size,) + s.shape, s.dtype), tree)


def _joined(tree):
    """[A, n, ...] -> [A x n, ...] in actor order."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


@dataclasses.dataclass(frozen=True)
class RaySource(Source):
    """``actors`` Ray actors, each stepping ``env.num_envs / actors`` of the run's
    environments (``env`` gives their spec here; it is never stepped in this process)."""

    env: Any
    pipeline: ObservationPipeline
    unroll_length: int
    actors: int
    dist: DistConfig
    pool: ActorPool = dataclasses.field(compare=False, repr=False)
    # An iteration waits on the actors' round trips, not on the host's loop, and its
    # metrics (policy lag, faults, unrolls taken) are the iteration's own.
    iterations_in_one_call: ClassVar[bool] = False

    def __post_init__(self):
        # One actor's source, traced here only for the shapes of its state and steps.
        local = EnvSource(self.env.with_num_envs(self.envs_per_actor), self.pipeline,
                          self.unroll_length)  # fmt: skip
        object.__setattr__(self, "_local", local)

    @property
    def is_async(self) -> bool:
        return self.dist.driver == ASYNC

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    @property
    def lanes(self) -> int:
        return self.env.num_envs

    @property
    def envs_per_actor(self) -> int:
        return self.env.num_envs // self.actors

    @property
    def unrolls_per_iteration(self) -> int:
        return self.dist.learn_queue_cap if self.is_async else self.actors

    @property
    def steps_per_iteration(self) -> int:
        return self.unroll_length * self.envs_per_actor * self.unrolls_per_iteration

    @property
    def replayer(self) -> str | None:
        return "cycle_one_time" if self.is_async else None  # the learner takes whole unrolls

    @property
    def replay_sizes(self) -> dict:
        if not self.is_async:
            return {}
        return {"num_actors": self.actors, "learn_queue_cap": self.dist.learn_queue_cap}

    @property
    def resume_note(self) -> str | None:
        if not self.env.is_jax:
            return (
                "Gymnasium environments cannot be saved in a checkpoint: the actors' episodes "
                "restart on resume"
            )
        if self.is_async:
            return (
                "an asynchronous run resumes with no learner state lost, but not exactly: the "
                "actors make their unfinished unrolls again with the newest parameters"
            )
        return None

    # ------------------------------------------------------------------ processes

    def start(self) -> None:
        """Connects to Ray and starts the actors (before the run writes anything)."""
        self.pool.start()

    def close(self) -> None:
        self.pool.close()

    @property
    def failure(self) -> BaseException | None:
        """Why the actors stopped the run, in one line (a host callback raised it)."""
        return self.pool.failure

    # ------------------------------------------------------------------ pure functions

    def _shapes(self, agent: Agent, agent_state, key):
        """(one actor's state, its first steps [n, 1], one unroll [n, T]) as shapes."""
        local = self._local
        snapshot, first = jax.eval_shape(functools.partial(local.init, agent), agent_state, key)
        _, steps = jax.eval_shape(
            functools.partial(local.collect, agent), agent_state, snapshot, key
        )
        return snapshot, first, steps

    def _taken_shapes(self, snapshot, first, steps) -> Taken:
        a, u = self.actors, self.unrolls_per_iteration
        return Taken(
            steps=_stacked(steps, u),
            actors=jax.ShapeDtypeStruct((u,), jnp.int32),
            leads=_stacked(first, u),
            snapshots=_stacked(snapshot, a),
            next_unroll=jax.ShapeDtypeStruct((a,), jnp.int32),
            taken=jax.ShapeDtypeStruct((a,), jnp.int32),
            counters=jax.ShapeDtypeStruct((3,), jnp.int32),
            lag=jax.ShapeDtypeStruct((2,), jnp.float32),
        )

    def _steps(self, steps, actors, leads=None):
        return ActorSteps(steps, actors, leads) if self.is_async else _joined(steps)

    def add(self, replay, replay_state, steps, first: bool = False):
        if not self.is_async:
            return super().add(replay, replay_state, steps, first)
        return add_actor_steps(replay, replay_state, steps, first)

    def lanes_of(self, steps):
        """The asynchronous driver's unrolls [U, lanes, T] as [U x lanes, T]."""
        return _joined(steps.steps) if self.is_async else steps

    def init(self, agent: Agent, agent_state, key):
        """Every actor's fresh environments, acted on once: their first steps enter the
        replay (with policy lag 1 the first requests go out too)."""
        snapshot, first, _ = self._shapes(agent, agent_state, key)
        keys = actor_keys(key, self.actors)
        lagged_keys = None
        if self.dist.policy_lag:
            lagged_keys = actor_keys(jax.random.fold_in(key, _LAGGED_STREAM), self.actors)
        snapshots, first_steps = io_callback(
            self.pool.init,
            (_stacked(snapshot, self.actors), _stacked(first, self.actors)),
            agent_state,
            keys,
            lagged_keys,
        )
        zeros = jnp.zeros(self.actors, jnp.int32)
        state = RaySourceState(
            actors=snapshots,
            next_unroll=zeros,
            taken=zeros,
            counters=jnp.zeros(3, jnp.int32),
            lag=jnp.zeros(3, jnp.float32),
            version=jnp.zeros((), jnp.int32),
            key=key,
            lagged=(agent_state, lagged_keys, jnp.zeros((), jnp.int32))
            if lagged_keys is not None
            else (),
        )
        return state, self._steps(first_steps, jnp.arange(self.actors, dtype=jnp.int32))

    def collect(self, agent: Agent, agent_state, state: RaySourceState, key):
        """This iteration's unrolls, made by the actors with ``agent_state`` (or, with
        policy lag 1, with the previous iteration's)."""
        snapshot, first, steps = self._shapes(agent, agent_state, key)
        shapes = self._taken_shapes(snapshot, first, steps)
        lagged = ()
        if self.is_async:
            taken = io_callback(self.pool.collect_async, shapes, agent_state, state.version)
        else:
            keys = actor_keys(key, self.actors)
            taken = io_callback(self.pool.collect_sync, shapes, agent_state, keys, state.version)
            if self.dist.policy_lag:
                lagged = (agent_state, keys, state.version)
        state = RaySourceState(
            actors=taken.snapshots,
            next_unroll=taken.next_unroll,
            taken=taken.taken,
            counters=taken.counters,
            lag=jnp.concatenate([taken.lag, jnp.maximum(state.lag[2:], taken.lag[1:])]),
            version=state.version + 1,
            key=state.key,
            lagged=lagged,
        )
        return state, self._steps(taken.steps, taken.actors, taken.leads)

    def restart(self, agent: Agent, agent_state, state: RaySourceState, key):
        """A resumed run's actors, restored from the checkpoint's snapshots (requests that
        were in flight with policy lag 1 go out again)."""
        lagged = state.lagged if self.dist.policy_lag else None
        snapshots = io_callback(
            self.pool.restore,
            jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state.actors),
            state.actors,
            state.next_unroll,
            state.taken,
            state.counters,
            state.version,
            state.key,
            agent_state,
            lagged,
        )
        return state._replace(actors=snapshots)

    def last_steps(self, state: RaySourceState):
        """The step each environment last acted on [num_envs, 1], in actor order."""
        return jax.tree.map(lambda x: x[:, None], _joined(state.actors.pending))

    def observations(self, state: RaySourceState) -> PipelineState:
        """The actors' observation (and return) statistics merged (the evaluation's)."""
        pipeline = state.actors.observations
        stats = merge_stats(pipeline.stats) if self.pipeline.normalize else ()
        history = _joined(pipeline.history) if self.pipeline.history > 1 else ()
        returns = ()
        if self.pipeline.normalize_rewards:
            returns = ReturnStats(
                _joined(pipeline.returns.returns), merge_stats(pipeline.returns.stats)
            )
        return PipelineState(stats, history, returns)

    def view(self, state: RaySourceState):
        """What the learner sees of the actors' steps: normalised with their merged
        statistics."""
        return self.pipeline.view(self.observations(state))

    def episodes(self, state: RaySourceState) -> EpisodeStats:
        return join_episodes(state.actors.stats)

    def metrics(self, state: RaySourceState) -> dict:
        """Logged with every iteration: policy lag, faults, and per actor the unrolls taken
        and the index of its next one (equal unless an unroll was dropped or taken twice)."""
        values = {
            "dist/policy_lag_mean": state.lag[0],
            "dist/policy_lag_max": state.lag[1],
            "dist/actor_restarts": state.counters[0],
            "dist/unrolls_lost": state.counters[1],
            "dist/unrolls_dropped": state.counters[2],
        }
        for a in range(self.actors):
            values[f"dist/actor{a}_unrolls_taken"] = state.taken[a]
            values[f"dist/actor{a}_next_unroll"] = state.next_unroll[a]
        return {name: jnp.asarray(value, jnp.float32) for name, value in values.items()}

    def summary(self, state: RaySourceState) -> dict:
        """The final JSON line's ``dist`` (one seed's ``state``)."""
        state = jax.device_get(state)
        return {
            "dist": {
                "actors": self.actors,
                "driver": self.dist.driver,
                "actor_restarts": int(state.counters[0]),
                "unrolls_lost": int(state.counters[1]),
                "unrolls_dropped": int(state.counters[2]),
                "policy_lag_max": float(state.lag[2]),
                "actor_steps_per_s": self.pool.steps_per_s(),
            }
        }
