"""``cycle_one_time``: actors hand in unrolls; the learner takes them FIFO, each once (ALF).

``num_actors`` actors each step ``envs_per_actor`` environments and add their steps with
their actor id. Every actor owns one slot: a window of ``unroll_length + 1`` steps per
environment (its last unroll and the step before it, as in ``one_time``). A slot whose
``unroll_length`` new steps have all arrived *waits*, stamped with its arrival order;
``sample`` takes the ``learn_queue_cap`` oldest waiting slots and frees them.

Overwrite policy: an actor whose unroll still waits is *refused*, never overwritten. In
ALF an actor blocks on the learner's queue until there is room, so no unroll is lost and
none is trained on twice; a pure function cannot block, so ``can_add`` tells a driver to
hold the actor back, and an ``add`` that finds the slot waiting leaves the state as it was
and counts the refusal in ``state.refused``. No deadlock: ``learn_queue_cap <=
num_actors``, so when every actor waits there are enough unrolls to sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.replay.base import ReplayError, check_lanes, positive_int
from heron.replay.one_time import shift_in

_NOT_WAITING = np.iinfo(np.int32).max  # sorts after every arrival stamp


class CycleOneTimeState(NamedTuple):
    window: Any  # leaves [num_actors, envs_per_actor, unroll_length + 1, ...]
    fresh: jax.Array  # int32 [num_actors]: steps added since the slot was last sampled
    arrival: jax.Array  # int32 [num_actors]: arrival stamp of each waiting unroll
    next_arrival: jax.Array  # int32 []: stamp of the next complete unroll
    refused: jax.Array  # int32 []: adds turned away because the actor's unroll still waited


@dataclass(frozen=True)
class CycleOneTimeReplay:
    """FIFO, consume-once replay of whole unrolls from several actors; batches
    [learn_queue_cap x envs_per_actor, unroll_length + 1, ...], unrolls in arrival order."""

    num_actors: int
    envs_per_actor: int
    unroll_length: int
    learn_queue_cap: int
    name: str = "cycle_one_time"
    whole_unrolls: ClassVar[bool] = True  # each sample is whole unrolls, each handed out once

    def __post_init__(self) -> None:
        for field in ("num_actors", "envs_per_actor", "unroll_length", "learn_queue_cap"):
            positive_int(field, getattr(self, field))
        if self.learn_queue_cap > self.num_actors:
            raise ReplayError(
                f"learn_queue_cap={self.learn_queue_cap} must be <= num_actors="
                f"{self.num_actors}: each actor has one unroll waiting at most"
            )

    @property
    def num_envs(self) -> int:
        return self.num_actors * self.envs_per_actor

    def init(self, example_step: Any) -> CycleOneTimeState:
        """Empty slots shaped after one actor's step [envs_per_actor, ...]."""
        shape = (self.num_actors, self.envs_per_actor, self.unroll_length + 1)
        window = jax.tree.map(lambda x: jnp.zeros(shape + np.shape(x)[1:], x.dtype), example_step)
        zeros = jnp.zeros((self.num_actors,), jnp.int32)
        return CycleOneTimeState(
            window, zeros, zeros, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
        )

    def start(self, state: CycleOneTimeState, steps: Any, actor: Any = 0) -> CycleOneTimeState:
        """The first steps of ``actor``'s new streams [envs_per_actor, k, ...] (its fresh
        environments, or the step before an unroll that follows a dropped one): the newest
        becomes the step in front of the actor's next unroll and none counts towards it, so
        no unroll is made of them. Refused like ``add`` while the actor's unroll waits."""
        return self._put(state, steps, actor, fresh_steps=False)

    def add(self, state: CycleOneTimeState, steps: Any, actor: Any = 0) -> CycleOneTimeState:
        """Appends ``actor``'s steps [envs_per_actor, k, ...]; refused (state unchanged but
        ``refused`` + 1) while that actor's unroll waits. ``actor`` may be traced; a Python
        int out of range raises ReplayError."""
        return self._put(state, steps, actor, fresh_steps=True)

    def _put(self, state: CycleOneTimeState, steps, actor, fresh_steps: bool):
        num_steps = check_lanes(steps, self.envs_per_actor, "steps")
        if isinstance(actor, int | np.integer):
            self.check_actor(int(actor))
        accept = self.can_add(state, actor)
        window = jax.tree.map(
            lambda slots, x: slots.at[actor].set(
                jnp.where(accept, shift_in(slots[actor], x), slots[actor])
            ),
            state.window,
            steps,
        )
        fresh = jnp.where(accept, state.fresh[actor] + num_steps if fresh_steps else 0,
                          state.fresh[actor])  # fmt: skip
        arrives = accept & (fresh >= self.unroll_length)
        return CycleOneTimeState(
            window=window,
            fresh=state.fresh.at[actor].set(fresh),
            arrival=state.arrival.at[actor].set(
                jnp.where(arrives, state.next_arrival, state.arrival[actor])
            ),
            next_arrival=state.next_arrival + arrives.astype(jnp.int32),
            refused=state.refused + (~accept).astype(jnp.int32),
        )

    def waiting(self, state: CycleOneTimeState) -> jax.Array:
        """bool [num_actors]: slots holding a complete unroll not yet sampled."""
        return state.fresh >= self.unroll_length

    def can_add(self, state: CycleOneTimeState, actor: Any) -> jax.Array:
        """Whether ``add`` would accept steps from ``actor`` now, bool []."""
        return ~self.waiting(state)[actor]

    def can_sample(self, state: CycleOneTimeState) -> jax.Array:
        return jnp.sum(self.waiting(state), axis=-1) >= self.learn_queue_cap

    def next_actors(self, state: CycleOneTimeState) -> jax.Array:
        """Actors whose unrolls ``sample`` takes next, oldest first: int32 [learn_queue_cap]."""
        order = jnp.where(self.waiting(state), state.arrival, _NOT_WAITING)
        return jnp.argsort(order, stable=True)[: self.learn_queue_cap].astype(jnp.int32)

    def sample(self, state: CycleOneTimeState, key: jax.Array) -> tuple[Any, CycleOneTimeState]:
        """The ``learn_queue_cap`` oldest waiting unrolls, consumed: leaves
        [learn_queue_cap x envs_per_actor, unroll_length + 1, ...], each unroll's envs
        adjacent. Meaningful when ``can_sample``; ``key`` is unused."""
        del key
        chosen = self.next_actors(state)
        lanes = self.learn_queue_cap * self.envs_per_actor
        batch = jax.tree.map(
            lambda slots: slots[chosen].reshape((lanes,) + slots.shape[2:]), state.window
        )
        return batch, state._replace(fresh=state.fresh.at[chosen].set(0))

    def check_actor(self, actor: int) -> None:
        if not 0 <= actor < self.num_actors:
            raise ReplayError(f"actor must be in [0, {self.num_actors}), got {actor!r}")
