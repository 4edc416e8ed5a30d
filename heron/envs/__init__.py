"""Environments addressed by id, ``<prefix>:<name>``, in families: ``gymnax:<id>``,
``gym:<id>``, ``heron:<id>`` (``heron/envs/families/``, one file each), those a module of
yours registers with ``register_family(Family(...))``, or your own as
``module.path:Attribute``.

``make(env_id, num_envs)`` returns a JaxEnv (pure reset/step, compiled with the agent) or a
GymEnv (host-stepped Gymnasium vector env). Both expose ``spec``, ``num_envs``, ``is_jax``,
``reset(key) -> (state, TimeStep)``, ``step(state, action, key) -> (state, TimeStep)`` and
``with_num_envs(n)``.

Your own environment, by ``module.path:Attribute`` (the module importable from the current
directory or the Python path): a ``gymnasium.Env`` subclass, a gymnax ``Environment``
subclass, or a factory (no arguments) returning a ``gymnasium.Env``, a gymnax Environment or
a gymnax ``(env, params)`` pair. Or register ids (or a family) in a module of yours
(``gymnasium.register(...)``, ``heron.envs.register(...)`` or ``register_family``) and have it
imported first with ``import_env_module(name)`` (the CLI's ``--env-module``).

``check(env)`` checks an environment as heron will use it (see ``heron/envs/check.py``).
Ids heron cannot build here (a missing optional dependency, data downloaded at run time, an
id gymnasium keeps only for old code) raise EnvUnavailableError naming the reason.
"""

from heron.envs.adapters import import_gymnax
from heron.envs.check import EnvCheck, check
from heron.envs.errors import EnvUnavailableError, UnknownEnvError
from heron.envs.families.heron import id_of, register
from heron.envs.families.module_path import import_env_module
from heron.envs.family import Family
from heron.envs.gym_env import GymEnv
from heron.envs.jax_env import JaxEnv
from heron.envs.registry import (
    CUSTOM,
    is_builtin,
    jax_native_forms,
    make,
    make_one,
    options_of,
    parse_env_id,
    register_family,
    traced_libraries,
)

__all__ = [
    "CUSTOM",
    "EnvCheck",
    "EnvUnavailableError",
    "Family",
    "GymEnv",
    "JaxEnv",
    "UnknownEnvError",
    "check",
    "id_of",
    "import_env_module",
    "import_gymnax",
    "is_builtin",
    "jax_native_forms",
    "make",
    "make_one",
    "options_of",
    "parse_env_id",
    "register",
    "register_family",
    "traced_libraries",
]
