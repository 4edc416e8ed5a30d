"""Experience replayers chosen by name: ``make_replay(name, ...)``.

Each replayer is a set of pure functions over an explicit state (optax style): ``init``,
``add``, ``replay_all`` / ``sample`` and ``clear``. Experience is batch-major, [B, T, ...].

- ``one_time``: the last collection, replayed once (on-policy).
- ``uniform``: per-environment rings, ``sample(state, key, batch_size, length)`` draws
  contiguous sequences uniformly over valid starts (off-policy).
- ``cycle_one_time``: asynchronous actors' unrolls, consumed FIFO exactly once.
"""

from __future__ import annotations

from heron.replay.cycle_one_time import CycleOneTimeReplay, CycleOneTimeState
from heron.replay.one_time import OneTimeReplay, OneTimeState
from heron.replay.uniform import ReplayError, UniformReplay, UniformState

REPLAYERS = ("one_time", "uniform", "cycle_one_time")

_CLASSES = {
    "one_time": OneTimeReplay,
    "uniform": UniformReplay,
    "cycle_one_time": CycleOneTimeReplay,
}


class UnknownReplayError(ValueError):
    """A replayer name heron does not know."""


def make_replay(name: str, **kwargs):
    """The replayer called ``name``, built with ``kwargs`` (e.g. ``capacity``, ``num_envs``)."""
    if name not in _CLASSES:
        raise UnknownReplayError(
            f"invalid experience replayer name {name!r}; valid names: {', '.join(REPLAYERS)}"
        )
    try:
        return _CLASSES[name](**kwargs)
    except TypeError as exc:  # a missing or unknown keyword argument
        raise ReplayError(f"replayer {name!r}: {exc}") from exc


__all__ = [
    "REPLAYERS",
    "CycleOneTimeReplay",
    "CycleOneTimeState",
    "OneTimeReplay",
    "OneTimeState",
    "ReplayError",
    "UniformReplay",
    "UniformState",
    "UnknownReplayError",
    "make_replay",
]
