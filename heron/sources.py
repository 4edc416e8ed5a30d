"""Sources of experience by name: what a ``RunConfig`` can ask for, the run options each
source owns, and how ``heron.api.build`` makes it.

    environments   the run's own environments, stepped in this process (the default)
    dataset        a Minari dataset replayed offline (``--dataset``; heron.offline)
    actors         Ray actor processes stepping the environments (``--actors``; heron.distributed)

Each is a ``SourceKind``: whether a run asks for it, the checks of its options (a run that
does not ask for it must leave them alone), and how it makes its ``Source`` (the protocol of
``heron.training.sources``) for a built agent. Register another with ``register``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from heron.configs import ConfigError

# Where heron's own kinds are registered, imported when a run first asks for a source (their
# modules import the training code, which imports the run configuration).
BUILTIN_MODULES = ("heron.training.sources", "heron.offline.source", "heron.distributed.options")


@dataclasses.dataclass(frozen=True)
class Request:
    """What a source is made for: a built agent, its environments' pipeline, the run."""

    algo: str
    agent_config: Any
    agent: Any
    env: Any  # the run's environments (with collects False: one, which only evaluates)
    pipeline: Any
    run: Any


@dataclasses.dataclass(frozen=True)
class SourceKind:
    name: str  # a kind a run asks for by an option is named after it (--actors, --dataset)
    asked: Callable[[Any], bool]  # RunConfig -> whether the run asks for this source
    check: Callable[[Any], None]  # its options, one ConfigError line; asked for or not
    make: Callable[[Request], Any]  # -> Source
    # False: it collects nothing; its agent is made with collects=False and its environment
    # (one, at the evaluation's time limit) only evaluates
    collects: bool = True


_KINDS: dict[str, SourceKind] = {}


def register(kind: SourceKind) -> None:
    """Makes ``kind`` a source a run can ask for."""
    _KINDS[kind.name] = kind


def kinds() -> tuple[SourceKind, ...]:
    """Every registered kind, by name."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return tuple(_KINDS[name] for name in sorted(_KINDS))


def check(run) -> None:
    """Every source's checks of ``run``, and that it asks for one source at most."""
    every = kinds()
    asked = [kind for kind in every if kind.asked(run)]
    if len(asked) > 1:
        names = " or ".join(f"--{kind.name}" for kind in asked)
        raise ConfigError(
            f"{' and '.join(kind.name for kind in asked)} are two sources of experience; a "
            f"run learns from one: drop {names}"
        )
    for kind in every:
        kind.check(run)


def asked_for(run) -> SourceKind:
    """The source ``run`` asks for (the environments unless another is asked for)."""
    asked = [kind for kind in kinds() if kind.asked(run)]
    return asked[0] if asked else _KINDS["environments"]
