"""``module.path:Attribute``: a gymnasium.Env or gymnax Environment class of your own, or a
factory (no arguments) returning a gymnasium.Env, a gymnax Environment or a gymnax
``(env, params)`` pair; the module is imported from the Python path or the current
directory. ``import_env_module`` imports a module of yours whose import registers ids."""

from __future__ import annotations

import importlib
import os
import sys

from heron.envs.adapters import batched_from, defer_drawing_libraries, make_from
from heron.envs.errors import UnknownEnvError, first_line
from heron.envs.family import DOTTED_NAME, Family


def import_env_module(module_name: str | None):
    """Imports ``module_name`` (e.g. ``mypkg.envs``), whose import may register environment
    ids; None does nothing. The current directory is searched after the Python path, as
    ``python -m`` would. UnknownEnvError (one line) when it cannot be imported."""
    if module_name is None:
        return None
    if DOTTED_NAME.fullmatch(module_name) is None:
        raise UnknownEnvError(
            f"env module {module_name!r} is not a Python module path (e.g. mypkg.envs)"
        )
    return _import_user_module(module_name, f"env module {module_name!r}")


def _import_user_module(module_name: str, what: str):
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    defer_drawing_libraries()  # user modules of JAX environments mostly import gymnax
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name + ".").startswith(error.name + "."):
            raise UnknownEnvError(
                f"cannot import {what}: no module named {error.name!r} on the Python path or "
                f"in the current directory {cwd!r}"
            ) from None
        raise UnknownEnvError(f"importing {what} failed: {first_line(error)}") from None
    except Exception as error:  # the user's module failed while importing
        raise UnknownEnvError(f"importing {what} failed: {first_line(error)}") from None


def _resolve(env_id: str):
    """The object ``module.path:Attribute`` names."""
    module_name, _, attribute = env_id.partition(":")
    target = _import_user_module(module_name, f"module {module_name!r} of {env_id!r}")
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UnknownEnvError(
                f"module {module_name!r} has no attribute {attribute!r} (environment {env_id!r})"
            )
        target = getattr(target, part)
    return target


def _find(env_id: str, name: str) -> None:
    _resolve(env_id)


def _make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None):
    return batched_from(env_id, _resolve(env_id), num_envs, max_episode_steps)


def _make_one(env_id: str, name: str):
    return make_from(env_id, _resolve(env_id))


FAMILY = Family(
    prefix=None,
    form="'module.path:Attribute' for your own (a gymnasium.Env class, or a factory returning "
    "a gymnasium Env or a gymnax (env, params) pair)",
    find=_find,
    make=_make,
    make_one=_make_one,
    jax_native=False,
)
