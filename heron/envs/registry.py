"""The registered environment families, and what ``heron.envs`` does with an id through
them: parse it, make it, say whether it is builtin. heron's families (each module of
``heron.envs.families`` defines one as ``FAMILY``) are registered when this is imported."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from heron.envs import families
from heron.envs.errors import EnvUnavailableError, UnknownEnvError, building
from heron.envs.family import DOTTED_NAME, Family

CUSTOM = "python"  # the prefix parse_env_id gives ``module.path:Attribute`` ids

_FAMILIES: dict[str | None, Family] = {}  # by prefix; None: module paths


def register_family(family: Family) -> None:
    """Makes ``<family.prefix>:<name>`` ids resolve to ``family``; ValueError where another
    family has the prefix."""
    known = _FAMILIES.get(family.prefix)
    if known is not None and known != family:
        raise ValueError(
            f"environment family prefix {family.prefix!r} is registered already (ids "
            f"{known.written}); register yours under another prefix"
        )
    _FAMILIES[family.prefix] = family


def _naming_help() -> str:
    forms = [f.written for f in sorted(_FAMILIES.values(), key=lambda f: f.prefix is None)]
    listed = f"{', '.join(forms[:-1])}, or {forms[-1]}" if len(forms) > 1 else forms[0]
    return f"environment ids carry their source: {listed}"


def _family_of(env_id: str) -> tuple[Family, str]:
    source, sep, name = env_id.partition(":")
    family = _FAMILIES.get(source) if name else None
    if family is not None:
        return family, name
    if sep and None in _FAMILIES and DOTTED_NAME.fullmatch(source) and DOTTED_NAME.fullmatch(name):
        return _FAMILIES[None], env_id
    raise UnknownEnvError(f"unknown environment {env_id!r}: {_naming_help()}")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def _found(env_id: str) -> tuple[Family, str]:
    """``env_id``'s family and name, once its dependencies and the name are found."""
    family, name = _family_of(env_id)
    missing = [module for module in family.requires if not _importable(module)]
    if missing:
        install = f'; install heron\'s {family.extra} extra: pip install "heron[{family.extra}]"'
        raise EnvUnavailableError(
            f"cannot make {env_id}: it needs the Python package {missing[0]!r}, which is not "
            f"installed{install if family.extra else ''}"
        )
    family.find(env_id, name)
    return family, name


def parse_env_id(env_id: str) -> tuple[str, str]:
    """Splits ``prefix:name`` and checks the family and the name exist. Module paths
    (``module.path:Attribute``) give ``(CUSTOM, env_id)`` once the attribute is found."""
    family, name = _found(env_id)
    return family.prefix or CUSTOM, name


def make(env_id: str, num_envs: int = 1, max_episode_steps: int | None = None, options=None):
    """Creates ``num_envs`` environments of ``env_id``: a JaxEnv or a GymEnv. ``options``: the
    family's own (``Family.options``; None: its defaults), ignored by families without."""
    if num_envs <= 0:
        raise ValueError(f"num_envs must be > 0, got {num_envs}")
    family, name = _found(env_id)
    own = (options,) if family.options else ()
    with building(env_id, family.downloads.get(name, "data")):
        return family.make(env_id, name, num_envs, max_episode_steps, *own)


def options_of(run) -> object | None:
    """The options ``run`` (a RunConfig) gives its environment's family, if it takes any."""
    family, _ = _found(run.env)
    return getattr(run, family.options) if family.options else None


def make_one(env_id: str):
    """One unbatched environment of ``env_id`` as its library makes it: a ``gymnasium.Env``
    (``gym:`` ids and your Gymnasium envs) or a gymnax ``(env, params)`` pair."""
    family, name = _found(env_id)
    with building(env_id, family.downloads.get(name, "data")):
        return family.make_one(env_id, name)


def is_builtin(env_id: str) -> bool:
    """Whether ``env_id`` is made by gymnax's or heron's own code (not by a user's module,
    nor by a factory registered under one of heron's ids), so it is as pinned as they are."""
    source, _, name = env_id.partition(":")
    family = _FAMILIES.get(source)
    return family is not None and family.is_builtin(name)


def jax_native_forms() -> tuple[str, ...]:
    """How the ids of the registered JAX-native families are written (``gymnax:<id>``)."""
    return tuple(f.written for f in _FAMILIES.values() if f.jax_native)


def traced_libraries() -> tuple[str, ...]:
    """The distributions the registered families trace into compiled programs, each once."""
    return tuple(dict.fromkeys(lib for f in _FAMILIES.values() for lib in f.traced_libraries))


for _module in pkgutil.iter_modules(families.__path__):
    register_family(importlib.import_module(f"{families.__name__}.{_module.name}").FAMILY)
