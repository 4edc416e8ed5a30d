"""``cycle_one_time``: asynchronous actors hand in unrolls; the learner takes them FIFO, once.

ALF's ``cycle_one_time`` replayer serves an asynchronous driver: ``num_actors`` actors each
unroll ``envs_per_actor`` environments for ``unroll_length`` steps and queue the result; the
learner trains on ``learn_queue_cap`` unrolls at a time, each exactly once. Here every actor
owns one slot (storage [num_actors, envs_per_actor, unroll_length, ...], preallocated), every
accepted unroll gets an arrival stamp, and ``sample`` takes the ``learn_queue_cap`` oldest
waiting unrolls (FIFO across actors) and frees their slots.

Overwrite policy: an actor whose previous unroll still waits is *refused*, never
overwritten. In ALF an actor blocks on the learner's queue until there is room, so no
unroll is lost and none is trained on twice; a pure function cannot block, so the host-side
``check_can_add`` raises (the actor must wait for a ``sample``), ``can_add`` tells a
compiled driver, and a compiled ``add`` that finds the slot occupied leaves the state as it
was and counts the refusal in ``state.refused``. Keeping the older unroll keeps arrival
order intact. No deadlock: ``learn_queue_cap <= num_actors``, so when every actor is
blocked there are enough unrolls waiting to sample.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.replay.uniform import ReplayError, host_min, leading_dims, positive_int

_NOT_WAITING = np.iinfo(np.int32).max  # sorts after every arrival stamp


class CycleOneTimeState(NamedTuple):
    data: Any  # leaves [num_actors, envs_per_actor, unroll_length, ...]: one slot per actor
    arrival: jax.Array  # int32 [num_actors]: arrival stamp of each slot's unroll
    waiting: jax.Array  # bool [num_actors]: the slot holds an unroll not yet consumed
    next_arrival: jax.Array  # int32 []: stamp of the next accepted unroll (= unrolls accepted)
    refused: jax.Array  # int32 []: adds turned away because the actor's unroll still waited


@dataclass(frozen=True)
class CycleOneTimeReplay:
    """FIFO, consume-once replay of whole unrolls from asynchronous actors.

    Args:
      num_actors: actors adding unrolls, each identified by ``actor_id`` in [0, num_actors).
      unroll_length: T of every unroll, as ``add`` receives it.
      learn_queue_cap: unrolls per ``sample``; at most ``num_actors``.
      envs_per_actor: environments each actor steps, B of every unroll.
    """

    num_actors: int
    unroll_length: int
    learn_queue_cap: int
    envs_per_actor: int = 1

    def __post_init__(self) -> None:
        for name in ("num_actors", "unroll_length", "learn_queue_cap", "envs_per_actor"):
            positive_int(name, getattr(self, name))
        if self.learn_queue_cap > self.num_actors:
            raise ReplayError(
                f"learn_queue_cap={self.learn_queue_cap} must be <= num_actors="
                f"{self.num_actors}: each actor has one unroll waiting at most"
            )

    def init(self, example_unroll: Any) -> CycleOneTimeState:
        """Empty slots shaped after ``example_unroll``: [envs_per_actor, unroll_length, ...]."""
        self._check_unroll(example_unroll, "example_unroll")
        data = jax.tree.map(
            lambda x: jnp.zeros((self.num_actors,) + np.shape(x), x.dtype), example_unroll
        )
        return CycleOneTimeState(
            data=data,
            arrival=jnp.zeros((self.num_actors,), jnp.int32),
            waiting=jnp.zeros((self.num_actors,), bool),
            next_arrival=jnp.zeros((), jnp.int32),
            refused=jnp.zeros((), jnp.int32),
        )

    def add(self, state: CycleOneTimeState, unroll: Any, actor_id: Any) -> CycleOneTimeState:
        """Queue ``actor_id``'s unroll, leaves [envs_per_actor, unroll_length, ...].

        Refused (state unchanged but ``refused`` + 1) while that actor's previous unroll still
        waits. ``actor_id`` may be traced; a Python int out of range raises ReplayError.
        """
        self._check_unroll(unroll, "unroll")
        if isinstance(actor_id, int | np.integer):
            self._check_actor(int(actor_id))
        accept = ~state.waiting[actor_id]
        data = jax.tree.map(
            lambda slots, x: slots.at[actor_id].set(jnp.where(accept, x, slots[actor_id])),
            state.data,
            unroll,
        )
        stamp = jnp.where(accept, state.next_arrival, state.arrival[actor_id])
        return CycleOneTimeState(
            data=data,
            arrival=state.arrival.at[actor_id].set(stamp),
            waiting=state.waiting.at[actor_id].set(True),
            next_arrival=state.next_arrival + accept.astype(jnp.int32),
            refused=state.refused + (~accept).astype(jnp.int32),
        )

    def sample(self, state: CycleOneTimeState) -> tuple[Any, CycleOneTimeState]:
        """The ``learn_queue_cap`` oldest waiting unrolls, consumed.

        Returns (experience, state): leaves [learn_queue_cap * envs_per_actor, unroll_length,
        ...], unrolls in arrival order, each one's envs adjacent. Meaningful only when
        ``is_ready(state)``; ``check_can_sample`` says so on the host.
        """
        chosen = self.next_actors(state)
        k = self.learn_queue_cap
        experience = jax.tree.map(
            lambda slots: slots[chosen].reshape((k * self.envs_per_actor,) + slots.shape[2:]),
            state.data,
        )
        return experience, state._replace(waiting=state.waiting.at[chosen].set(False))

    def next_actors(self, state: CycleOneTimeState) -> jax.Array:
        """Actors whose unrolls ``sample`` takes next, oldest first: int32 [learn_queue_cap]."""
        order_key = jnp.where(state.waiting, state.arrival, _NOT_WAITING)
        return jnp.argsort(order_key, stable=True)[: self.learn_queue_cap].astype(jnp.int32)

    def num_waiting(self, state: CycleOneTimeState) -> jax.Array:
        """Complete unrolls waiting to be consumed, int32 []."""
        return jnp.sum(state.waiting, axis=-1, dtype=jnp.int32)

    def is_ready(self, state: CycleOneTimeState) -> jax.Array:
        """Whether ``sample`` can take ``learn_queue_cap`` unrolls, bool []."""
        return self.num_waiting(state) >= self.learn_queue_cap

    def can_add(self, state: CycleOneTimeState, actor_id: Any) -> jax.Array:
        """Whether ``add`` would accept an unroll from ``actor_id`` now, bool []."""
        return ~state.waiting[actor_id]

    def clear(self, state: CycleOneTimeState) -> CycleOneTimeState:
        """Drop every waiting unroll."""
        return state._replace(waiting=jnp.zeros_like(state.waiting))

    def check_can_sample(self, state: CycleOneTimeState) -> None:
        """Host-side: raise ReplayError when fewer than ``learn_queue_cap`` unrolls wait (a
        state vmapped over seeds is judged by its emptiest member)."""
        waiting = host_min(self.num_waiting(state))
        if waiting < self.learn_queue_cap:
            raise ReplayError(
                f"only {waiting} complete unroll(s) waiting; a sample takes learn_queue_cap="
                f"{self.learn_queue_cap}"
            )

    def check_can_add(self, state: CycleOneTimeState, actor_id: int) -> None:
        """Host-side: raise ReplayError for an unknown actor, or one whose previous unroll has
        not been consumed yet (it must wait for a ``sample``; nothing is overwritten)."""
        self._check_actor(actor_id)
        if bool(np.any(np.asarray(state.waiting)[..., actor_id])):
            raise ReplayError(
                f"actor {actor_id}'s previous unroll has not been consumed yet; "
                "sample before it adds again (cycle_one_time never overwrites)"
            )

    def _check_actor(self, actor_id: int) -> None:
        valid = isinstance(actor_id, numbers.Integral) and not isinstance(actor_id, bool)
        if not valid or not 0 <= actor_id < self.num_actors:
            raise ReplayError(f"actor_id must be in [0, {self.num_actors}), got {actor_id!r}")

    def _check_unroll(self, unroll: Any, what: str) -> None:
        dims = leading_dims(unroll, what)
        expected = (self.envs_per_actor, self.unroll_length)
        if dims != expected:
            raise ReplayError(
                f"{what} is [{dims[0]}, {dims[1]}, ...]; this replay takes [envs_per_actor, "
                f"unroll_length] = [{expected[0]}, {expected[1]}, ...]"
            )
