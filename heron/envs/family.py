"""An environment family: the ids under one prefix (``gymnax:<id>``) and how heron builds
them. heron's own are in ``heron/envs/families/``, one file each; a module of yours
registers more with ``heron.envs.register_family(Family(...))``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from heron.envs.errors import UnknownEnvError

if TYPE_CHECKING:
    from heron.envs.gym_env import GymEnv
    from heron.envs.jax_env import JaxEnv

DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # a module path, an attribute path
_PREFIX = re.compile(r"[A-Za-z][\w-]*")


def never(name: str) -> bool:
    """``Family.is_builtin`` of a family whose ids are all made by a user's code."""
    return False


@dataclasses.dataclass(frozen=True)
class Family:
    """Environments addressed as ``<prefix>:<name>``; heron calls ``find`` on every id it
    parses and ``make`` or ``make_one`` inside one translation of build errors into
    one-line EnvUnavailableError (a missing package, a failed download)."""

    prefix: str | None
    """Its ids are ``<prefix>:<name>``. None for the one family of ``module.path:Attribute``
    ids, tried where the part before ':' is no registered prefix (its names are whole ids)."""
    find: Callable[[str, str], None]
    """``find(env_id, name)`` raises UnknownEnvError, naming the valid choices, where ``name``
    is not one of the family's (``find_in(ids)`` looks it up in the family's list)."""
    make: Callable[[str, str, int, int | None], JaxEnv | GymEnv]
    """``make(env_id, name, num_envs, max_episode_steps)``: ``num_envs`` environments as
    one JaxEnv or GymEnv (``max_episode_steps`` None: the environment's own time limit)."""
    make_one: Callable[[str, str], Any]
    """``make_one(env_id, name)``: one unbatched environment as its library makes it, a
    ``gymnasium.Env`` or a gymnax ``(env, params)`` pair (what ``check`` plays)."""
    jax_native: bool
    """Whether its own environments are JAX environments, compiled with the agent."""
    form: str = ""
    """How its ids are written, for the error that lists the families (default
    ``'<prefix>:<id>'``)."""
    traced_libraries: tuple[str, ...] = ()
    """Distributions whose code its environments trace into compiled programs (the program
    cache's key holds their versions)."""
    is_builtin: Callable[[str], bool] = never
    """``is_builtin(name)``: whether the id is made by code as pinned as heron's (heron's own
    or a pinned library's, not a user's module), so the program cache may keep its programs."""
    requires: tuple[str, ...] = ()
    """Modules it needs that heron does not install by default (checked before ``find``)."""
    extra: str | None = None
    """The pip extra of heron that installs ``requires``: ``pip install "heron[<extra>]"``."""
    options: str | None = None
    """The RunConfig field holding the family's own options (ale: ``atari``), given to its
    ``make`` as a fifth argument (None: the defaults); None where it has none."""
    downloads: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Names whose construction downloads data, and what (for the line of a failed download)."""

    def __post_init__(self):
        if self.prefix is not None and _PREFIX.fullmatch(self.prefix) is None:
            raise ValueError(
                f"environment family prefix {self.prefix!r} is not a name: a letter, then "
                "letters, digits, '_' or '-' (e.g. 'brax')"
            )

    @property
    def written(self) -> str:
        return self.form or f"'{self.prefix}:<id>'"


def find_in(ids: Callable[[], Sequence[str]]) -> Callable[[str, str], None]:
    """A ``Family.find`` that looks the name up in ``ids()`` (listing them when it is not
    there: the first 40)."""

    def find(env_id: str, name: str) -> None:
        known = list(ids())
        if name not in known:
            prefix = env_id.partition(":")[0]
            raise UnknownEnvError(
                f"unknown {prefix} environment {name!r} in {env_id!r}; {prefix} ids: "
                f"{', '.join(known[:40])}{', ...' if len(known) > 40 else ''}"
            )

    return find
