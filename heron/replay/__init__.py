"""Experience replayers chosen by name (ALF's ``exp_replayer``), one protocol for all
(see ``heron/replay/base.py``):

- ``one_time``: the last unroll of every environment, replayed once (on-policy).
- ``uniform``: per-environment rings; sequences sampled uniformly, at a replay ratio.
- ``cycle_one_time``: unrolls of several actors, consumed FIFO exactly once.
"""

from __future__ import annotations

from heron.replay.base import Replay, ReplayError, ReplaySizes
from heron.replay.cycle_one_time import CycleOneTimeReplay, CycleOneTimeState
from heron.replay.one_time import OneTimeReplay, OneTimeState
from heron.replay.uniform import UniformReplay, UniformState

REPLAYERS = ("one_time", "uniform", "cycle_one_time")


class UnknownReplayError(ReplayError):
    """A replayer name heron does not know, or one an agent cannot learn from."""


def check_name(name: str, served: tuple[str, ...] = REPLAYERS, who: str = "heron") -> str:
    """``name`` when it is a replayer ``who`` serves; otherwise an error listing the valid
    names."""
    if name not in REPLAYERS:
        raise UnknownReplayError(
            f"invalid experience replayer name {name!r}; valid names: {', '.join(REPLAYERS)}"
        )
    if name not in served:
        raise UnknownReplayError(
            f"{who} cannot learn from the {name!r} replayer; it serves {', '.join(served)}"
        )
    return name


def make_replay(name: str, sizes: ReplaySizes) -> Replay:
    """The replayer called ``name``, sized by ``sizes``."""
    check_name(name)
    if name == "one_time":
        return OneTimeReplay(sizes.num_envs, sizes.unroll_length)
    if name == "uniform":
        return UniformReplay(
            num_envs=sizes.num_envs,
            capacity=sizes.capacity,
            batch_size=sizes.batch_size,
            sequence_length=sizes.sequence_length,
            min_size=sizes.min_size,
            ratio=sizes.ratio,
            frame_history=sizes.frame_history,
        )
    if sizes.num_envs % sizes.num_actors:
        raise ReplayError(
            f"num_envs={sizes.num_envs} must be a multiple of num_actors={sizes.num_actors}: "
            "every actor steps the same number of environments"
        )
    return CycleOneTimeReplay(
        num_actors=sizes.num_actors,
        envs_per_actor=sizes.num_envs // sizes.num_actors,
        unroll_length=sizes.unroll_length,
        learn_queue_cap=sizes.learn_queue_cap,
    )


__all__ = [
    "REPLAYERS",
    "CycleOneTimeReplay",
    "CycleOneTimeState",
    "OneTimeReplay",
    "OneTimeState",
    "Replay",
    "ReplayError",
    "ReplaySizes",
    "UniformReplay",
    "UniformState",
    "UnknownReplayError",
    "check_name",
    "make_replay",
]
