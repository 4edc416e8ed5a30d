"""``one_time``: the last unroll of every environment, replayed once (on-policy).

Each lane keeps a window of ``unroll_length + 1`` steps: the last unroll and the step
before it, whose successor it bootstraps. ``sample`` returns the window once
``unroll_length`` new steps have arrived since the last sample, and marks them consumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.replay.base import check_lanes, positive_int


class OneTimeState(NamedTuple):
    window: Any  # leaves [num_envs, unroll_length + 1, ...]: oldest first
    fresh: jax.Array  # int32 []: steps added since the last sample


def shift_in(window, steps):
    """``window`` [B, W, ...] with ``steps`` [B, k, ...] appended and the oldest k dropped."""
    width = window.shape[1]
    return jnp.concatenate([window, steps], axis=1)[:, -width:]


@dataclass(frozen=True)
class OneTimeReplay:
    """On-policy replay: batches [num_envs, unroll_length + 1, ...], each unroll once."""

    num_envs: int
    unroll_length: int
    name: str = "one_time"
    whole_unrolls: ClassVar[bool] = True  # each sample is whole unrolls, each handed out once

    def __post_init__(self) -> None:
        positive_int("num_envs", self.num_envs)
        positive_int("unroll_length", self.unroll_length)

    def init(self, example_step: Any) -> OneTimeState:
        """An empty window shaped after one step [num_envs, ...]."""
        window = jax.tree.map(
            lambda x: jnp.zeros((self.num_envs, self.unroll_length + 1) + np.shape(x)[1:], x.dtype),
            example_step,
        )
        return OneTimeState(window, jnp.zeros((), jnp.int32))

    def start(self, state: OneTimeState, steps: Any, actor: Any = 0) -> OneTimeState:
        """The first steps of new streams [num_envs, k, ...]: the newest becomes the step in
        front of the next unroll; none counts towards it (a partial unroll is dropped)."""
        del actor
        check_lanes(steps, self.num_envs, "steps")
        window = jax.tree.map(shift_in, state.window, steps)
        return OneTimeState(window, jnp.zeros_like(state.fresh))

    def add(self, state: OneTimeState, steps: Any, actor: Any = 0) -> OneTimeState:
        """Appends steps [num_envs, k, ...] (``actor`` is ignored: one actor)."""
        del actor
        num_steps = check_lanes(steps, self.num_envs, "steps")
        window = jax.tree.map(shift_in, state.window, steps)
        return OneTimeState(window, state.fresh + num_steps)

    def can_sample(self, state: OneTimeState) -> jax.Array:
        return state.fresh >= self.unroll_length

    def sample(self, state: OneTimeState, key: jax.Array) -> tuple[Any, OneTimeState]:
        """The window [num_envs, unroll_length + 1, ...], consumed (meaningful when
        ``can_sample``); deterministic, ``key`` is unused."""
        del key
        return state.window, state._replace(fresh=jnp.zeros_like(state.fresh))
