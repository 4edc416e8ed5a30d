"""Experience replayers chosen by name: ``make_replay(name, ...)``.

Each replayer is a set of pure functions over an explicit state (optax style): ``init``,
``add``, ``replay_all`` / ``sample`` and ``clear``. Experience is batch-major, [B, T, ...].
"""

from __future__ import annotations

from heron.replay.one_time import OneTimeReplay, OneTimeState

REPLAYERS = ("one_time",)


class UnknownReplayError(ValueError):
    """A replayer name heron does not know."""


def make_replay(name: str, **kwargs):
    if name == "one_time":
        return OneTimeReplay(**kwargs)
    raise UnknownReplayError(
        f"invalid experience replayer name {name!r}; valid names: {', '.join(REPLAYERS)}"
    )


__all__ = ["REPLAYERS", "OneTimeReplay", "OneTimeState", "UnknownReplayError", "make_replay"]
