"""Parameters from another run: every parameter whose path and shape match is copied.

Paths are the key paths of the two pytrees (NamedTuple fields, dict keys). A parameter of
the new agent (a leaf under a state field whose name ends in ``params``) takes the source
leaf whose path shares the longest suffix with its own (at least the module and the
parameter name, e.g. ``Dense_0/kernel``), when their shapes are equal. So a PPO run
fine-tunes from a PPO run of the same networks (identical paths), and a token policy takes
a world model's transformer body (``.../params/body/...`` in both). Two source leaves
equally close, or a close one of another shape, are refused: copying would be a guess.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from heron.configs import ConfigError

MIN_SHARED = 2  # path components a match must share: the module and the parameter's name


class TransferError(ConfigError):
    """Parameters that cannot be copied from another run."""


def _name(entry) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def leaves_by_path(tree) -> dict[tuple[str, ...], object]:
    """{(component, ...): leaf} of every array leaf of ``tree``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {tuple(_name(entry) for entry in path): leaf for path, leaf in flat}


def _shared_suffix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    count = 0
    while count < min(len(a), len(b)) and a[-1 - count] == b[-1 - count]:
        count += 1
    return count


def _is_parameter(path: tuple[str, ...]) -> bool:
    return bool(path) and path[0].endswith("params")


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Which target paths take which source leaf."""

    copied: dict  # target path -> source path
    fresh: list  # target parameter paths initialised afresh

    def summary(self, source: str) -> dict:
        return {
            "from": source,
            "copied": len(self.copied),
            "fresh": len(self.fresh),
            "copied_paths": ["/".join(p) for p in sorted(self.copied)][:50],
            "fresh_paths": ["/".join(p) for p in sorted(self.fresh)][:50],
        }


def plan(target, source) -> Transfer:
    """Matches the parameters of ``target`` (an agent state, or its abstract shapes) with
    the leaves of ``source``."""
    targets = {p: x for p, x in leaves_by_path(target).items() if _is_parameter(p)}
    sources = leaves_by_path(source)
    copied, fresh, clashes = {}, [], []
    for path, leaf in targets.items():
        scored = [(_shared_suffix(path, s), s) for s in sources]
        best = max((score for score, _ in scored), default=0)
        if best < MIN_SHARED:
            fresh.append(path)
            continue
        closest = [s for score, s in scored if score == best]
        fitting = [s for s in closest if np.shape(sources[s]) == np.shape(leaf)]
        if len(fitting) == 1 and len(closest) == 1:
            copied[path] = fitting[0]
        elif len(fitting) > 1:
            options = ", ".join("/".join(s) for s in fitting[:3])
            clashes.append(f"{'/'.join(path)} could come from any of {options}")
        else:
            got = ", ".join(f"{'/'.join(s)} {np.shape(sources[s])}" for s in closest[:3])
            clashes.append(f"{'/'.join(path)} {np.shape(leaf)} vs {got}")
    if clashes:
        raise TransferError(
            f"parameters clash with the run to initialise from: {'; '.join(clashes[:5])}"
            f"{' ...' if len(clashes) > 5 else ''}"
        )
    return Transfer(copied, fresh)


def apply(target, source, transfer: Transfer):
    """``target`` with the planned leaves of ``source`` copied in."""
    sources = leaves_by_path(source)
    flat, treedef = jax.tree_util.tree_flatten_with_path(target)
    leaves = []
    for path, leaf in flat:
        key = tuple(_name(entry) for entry in path)
        if key in transfer.copied:
            leaf = jax.numpy.asarray(sources[transfer.copied[key]], dtype=leaf.dtype)
        leaves.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, leaves)
