"""The replay protocol every replayer implements (flashbax's shape, optax's style).

A replayer is a frozen dataclass of pure functions over an explicit state; every size,
the batch a ``sample`` returns included, is fixed when the replayer is built:

    replay = make_replay("uniform", ReplaySizes(...))
    state = replay.init(example_step)            # one step [num_envs, ...]
    state = replay.start(state, first_steps)     # steps [num_envs, t, ...] of new streams
    state = replay.add(state, steps)             # steps [num_envs, T, ...], each step once
    ready = replay.can_sample(state)             # bool []: jit-safe
    batch, state = replay.sample(state, key)     # batch [batch, length, ...]

Steps are added exactly once, in the order they were acted on. Replayers that hand out
whole unrolls (``one_time``, ``cycle_one_time``) keep the step before each unroll too, so
the unrolls they return overlap by one step: that step bootstraps the earlier unroll.
``start`` takes the steps that begin new streams (the first steps of a run's environments):
stored like any step, but a replayer of whole unrolls keeps them only as the step in front
of the next unroll, never as an unroll of their own (ALF: each unroll once, with the
previous unroll's last step in front).
``can_sample`` is the rate limiter: the driver trains while it holds.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Protocol

import jax
import numpy as np

from heron.configs import ConfigError


class ReplayError(ConfigError):
    """A replay request that cannot be served, or a replayer built with bad values."""


class Replay(Protocol):
    name: str
    num_envs: int  # lanes of experience each ``add`` carries (actors x envs per actor)
    whole_unrolls: bool  # samples are whole unrolls, each handed out once (else sequences)

    def init(self, example_step: Any) -> Any: ...

    def start(self, state: Any, steps: Any, actor: Any = 0) -> Any: ...

    def add(self, state: Any, steps: Any, actor: Any = 0) -> Any: ...

    def can_sample(self, state: Any) -> jax.Array: ...

    def sample(self, state: Any, key: jax.Array) -> tuple[Any, Any]: ...


@dataclasses.dataclass(frozen=True)
class ReplaySizes:
    """Everything that sizes a replayer; each replayer reads the fields it needs.

    num_envs: lanes of experience the driver adds (environments, or one per dataset).
    unroll_length: steps each lane adds per collection (the unrolls one_time and
      cycle_one_time hand out have one more: the step before them).
    batch_size, sequence_length: the [batch_size, sequence_length] sequences ``uniform``
      samples.
    capacity: steps ``uniform`` keeps per lane.
    min_size: steps stored across lanes before ``uniform`` serves a sample.
    ratio: samples ``uniform`` serves per step added once ``min_size`` is
      reached (the replay ratio); None serves without limit (a fixed dataset).
    num_actors, learn_queue_cap: ``cycle_one_time``'s actors (each owning num_envs /
      num_actors lanes) and the unrolls one sample takes.
    frame_history: observations stacked from this many frames, of which ``uniform`` keeps
      only the newest per step and stacks them again on sampling (1: kept as they come).
    """

    num_envs: int
    unroll_length: int = 1
    batch_size: int = 1
    sequence_length: int = 1
    capacity: int = 1
    min_size: int = 0
    ratio: float | None = None
    num_actors: int = 1
    learn_queue_cap: int = 1
    frame_history: int = 1


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, or a ReplayError naming ``name`` when it is not a positive int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ReplayError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def leading_dims(tree: Any, what: str) -> tuple[int, int]:
    """The shared [B, T] of every leaf of ``tree`` (static shapes); ReplayError otherwise."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ReplayError(f"{what} has no array leaves")
    shapes = {tuple(np.shape(x)[:2]) for x in leaves}
    if any(np.ndim(x) < 2 for x in leaves) or len(shapes) != 1:
        found = sorted({tuple(np.shape(x)) for x in leaves})
        raise ReplayError(f"{what} leaves must all be [B, T, ...] with one B and T; got {found}")
    (dims,) = shapes
    return dims


def check_lanes(tree: Any, num_envs: int, what: str) -> int:
    """The T of ``tree`` [num_envs, T, ...]; ReplayError when its leading axis differs."""
    lanes, num_steps = leading_dims(tree, what)
    if lanes != num_envs:
        raise ReplayError(
            f"{what} has {lanes} environments (leading axis); this replay holds num_envs={num_envs}"
        )
    return num_steps
