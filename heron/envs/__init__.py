"""Environments addressed by id: ``gymnax:<id>``, ``gym:<id>``, ``heron:<id>``, or your own as
``module.path:Attribute``.

``make(env_id, num_envs)`` returns a JaxEnv (pure reset/step, compiled with the agent) or a
GymEnv (host-stepped Gymnasium vector env). Both expose ``spec``, ``num_envs``, ``is_jax``,
``reset(key) -> (state, TimeStep)``, ``step(state, action, key) -> (state, TimeStep)`` and
``with_num_envs(n)``.

Your own environment, by ``module.path:Attribute`` (the module importable from the current
directory or the Python path): a ``gymnasium.Env`` subclass, a gymnax ``Environment``
subclass, or a factory (no arguments) returning a ``gymnasium.Env``, a gymnax Environment or
a gymnax ``(env, params)`` pair. Or register ids in a module of yours
(``gymnasium.register(...)`` or ``heron.envs.register(...)``) and have it imported first with
``import_env_module(name)`` (the CLI's ``--env-module``).

``check(env)`` checks an environment as heron will use it (see ``heron/envs/check.py``).
Ids heron cannot build here (a missing optional dependency, data downloaded at run time, an
id gymnasium keeps only for old code) raise EnvUnavailableError naming the reason.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable

from heron.envs.errors import EnvironmentRaised, raised_by_user
from heron.envs.gym_env import GymEnv
from heron.envs.jax_env import JaxEnv

SOURCES = ("gymnax", "gym", "heron")
CUSTOM = "python"  # the source parse_env_id gives ``module.path:Attribute`` ids

# heron's own JAX environments: id -> factory() returning (gymnax-style env, params).
_HERON_ENVS: dict[str, Callable] = {}

_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

# Ids whose construction downloads data (no network access: the id cannot be built).
_DOWNLOADS = {"gymnax:MNISTBandit-bsuite": "the MNIST data set"}


class UnknownEnvError(ValueError):
    """An environment id heron cannot resolve."""


class EnvUnavailableError(ValueError):
    """An environment id heron knows but cannot build here: a missing optional dependency,
    data that must be downloaded, or an id that is not supported."""


def register(env_id: str, factory: Callable) -> None:
    """Registers ``heron:<env_id>``; ``factory()`` returns a gymnax (env, params) pair, a
    gymnax Environment or a gymnasium.Env (one per call: heron makes several copies)."""
    _HERON_ENVS[env_id] = factory


def id_of(env) -> str:
    """The id under which an environment object runs: a gymnasium.Env (copied for each of
    the run's environments) or a gymnax Environment or (env, params) pair, registered as
    ``heron:<its class name>`` in this process (another process, to resume or evaluate the
    run, registers it again with ``register``; ``module.path:Attribute`` ids need not)."""
    import copy

    import gymnasium

    pair = env if isinstance(env, tuple) else None
    target = pair[0] if pair else env
    if not isinstance(target, gymnasium.Env | _gymnax_environment_type()):
        raise UnknownEnvError(
            f"env={env!r} is not an environment: pass an id string, a gymnasium.Env, a gymnax "
            "Environment or a gymnax (env, params) pair"
        )
    name = type(target).__name__
    if isinstance(target, gymnasium.Env):
        factory = lambda: copy.deepcopy(env)  # noqa: E731
    else:
        factory = lambda: env  # noqa: E731  (a JAX environment is stateless)
    base, copies = name, 1
    while name in _HERON_ENVS and getattr(_HERON_ENVS[name], "heron_env_object", None) is not env:
        copies += 1
        name = f"{base}-{copies}"
    factory.heron_env_object = env
    _HERON_ENVS[name] = factory
    return f"heron:{name}"


def _naming_help() -> str:
    return (
        "environment ids carry their source: 'gymnax:<id>' (e.g. gymnax:CartPole-v1), "
        "'gym:<id>' (e.g. gym:Pendulum-v1), 'heron:<id>', or 'module.path:Attribute' for your "
        "own (a gymnasium.Env class, or a factory returning a gymnasium Env or a gymnax "
        "(env, params) pair)"
    )


# gymnax imports every environment it has, and with them seaborn and matplotlib.pyplot
# (only its renderers use them): loaded lazily, they cost nothing until something draws.
_DRAWING_MODULES = ("seaborn", "matplotlib.pyplot")


def _load_lazily(name: str) -> None:
    """Puts a stand-in for module ``name`` in ``sys.modules`` that imports the real module
    on its first attribute access and hands every access on to it (importlib's LazyLoader
    loads as soon as ``import`` looks at ``__spec__`` on Python 3.11)."""
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return
    stand_in = types.ModuleType(name, f"{name}, imported on first use")

    def load(attribute):
        real = sys.modules.get(name)
        if real is None or real is stand_in:
            sys.modules.pop(name, None)
            real = importlib.import_module(name)
        return getattr(real, attribute)

    stand_in.__getattr__ = load
    sys.modules[name] = stand_in


def import_gymnax():
    """gymnax, without importing its renderers' drawing libraries until they draw."""
    for name in _DRAWING_MODULES:
        _load_lazily(name)
    import gymnax

    return gymnax


def _gymnax_ids() -> list[str]:
    return list(import_gymnax().registered_envs)


def _gym_ids() -> list[str]:
    import gymnasium

    return sorted(gymnasium.registry.keys())


def _is_custom(source: str, name: str) -> bool:
    return (
        source not in SOURCES
        and _DOTTED_NAME.fullmatch(source) is not None
        and _DOTTED_NAME.fullmatch(name) is not None
    )


def parse_env_id(env_id: str) -> tuple[str, str]:
    """Splits ``source:name`` and checks the source and the name exist. Custom ids
    (``module.path:Attribute``) give ``(CUSTOM, env_id)`` once the attribute is found."""
    source, sep, name = env_id.partition(":")
    if sep and _is_custom(source, name):
        _resolve_custom(env_id)
        return CUSTOM, env_id
    if not sep or source not in SOURCES or not name:
        raise UnknownEnvError(f"unknown environment {env_id!r}: {_naming_help()}")
    known = {"gymnax": _gymnax_ids, "gym": _gym_ids, "heron": lambda: sorted(_HERON_ENVS)}[source]()
    if name not in known:
        raise UnknownEnvError(
            f"unknown {source} environment {name!r} in {env_id!r}; {source} ids: "
            f"{', '.join(known[:40])}{', ...' if len(known) > 40 else ''}"
        )
    return source, name


# --------------------------------------------------------------------------- your own envs


def import_env_module(module_name: str | None):
    """Imports ``module_name`` (e.g. ``mypkg.envs``), whose import may register environment
    ids; None does nothing. The current directory is searched after the Python path, as
    ``python -m`` would. UnknownEnvError (one line) when it cannot be imported."""
    if module_name is None:
        return None
    if _DOTTED_NAME.fullmatch(module_name) is None:
        raise UnknownEnvError(
            f"env module {module_name!r} is not a Python module path (e.g. mypkg.envs)"
        )
    return _import_user_module(module_name, f"env module {module_name!r}")


def _import_user_module(module_name: str, what: str):
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name + ".").startswith(error.name + "."):
            raise UnknownEnvError(
                f"cannot import {what}: no module named {error.name!r} on the Python path or "
                f"in the current directory {cwd!r}"
            ) from None
        raise UnknownEnvError(f"importing {what} failed: {_first_line(error)}") from None
    except Exception as error:  # the user's module failed while importing
        raise UnknownEnvError(f"importing {what} failed: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f" ({error.filename}, line {error.lineno})"
    return f"{type(error).__name__}: {lines[0] if lines else ''}{where}"


def _resolve_custom(env_id: str):
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


def _gymnax_environment_type():
    return import_gymnax().environments.environment.Environment


def make_one(env_id: str):
    """One unbatched environment of ``env_id`` as its library makes it: a ``gymnasium.Env``
    (``gym:`` ids and your Gymnasium envs) or a gymnax ``(env, params)`` pair."""
    source, name = parse_env_id(env_id)
    with _building(env_id):
        if source == "gymnax":
            return import_gymnax().make(name)
        if source == "heron":
            return _custom_env(env_id, _HERON_ENVS[name])
        if source == "gym":
            import gymnasium

            _refuse_placeholders(env_id, name)
            return gymnasium.make(name, disable_env_checker=True)
        return _custom_env(env_id, _resolve_custom(env_id))


def _custom_env(env_id: str, target):
    """The gymnasium.Env or gymnax (env, params) pair that ``target`` (a class or a
    factory) makes; UnknownEnvError when it makes neither."""
    import gymnasium

    environment = _gymnax_environment_type()
    if not callable(target):
        raise UnknownEnvError(
            f"{env_id!r} names a {type(target).__name__}, not an environment class or factory"
        )
    made = target()
    if isinstance(made, gymnasium.Env):
        return made
    if isinstance(made, environment):
        return made, made.default_params
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], environment):
        return made
    raise UnknownEnvError(
        f"{env_id!r} gave a {type(made).__name__}; a factory must return a gymnasium.Env, "
        "a gymnax Environment or a gymnax (env, params) pair"
    )


def _jax_env(env_id: str, env, params, num_envs: int, max_episode_steps: int | None) -> JaxEnv:
    if not (hasattr(params, "max_steps_in_episode") and hasattr(params, "replace")):
        raise UnknownEnvError(
            f"{env_id!r}: gymnax params must be a flax struct with max_steps_in_episode "
            f"(a subclass of gymnax's EnvParams), got {type(params).__name__}"
        )
    return JaxEnv(env, params, num_envs, max_episode_steps, env_id)


def _gym_from_factory(env_id: str, factory, first, num_envs: int, max_episode_steps):
    """A GymEnv of ``num_envs`` copies made by ``factory`` (``first`` is one already made:
    its spec gives the default time limit)."""
    import gymnasium

    spec = getattr(first, "spec", None)
    limit = max_episode_steps or getattr(spec, "max_episode_steps", None)
    first.close()

    def make_single():
        env = factory()
        if max_episode_steps is not None:
            env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
        return env

    def make_vector_env(n: int):
        return gymnasium.vector.SyncVectorEnv([make_single] * n)

    return GymEnv(make_vector_env, num_envs, env_id, limit)


# --------------------------------------------------------------------------- make


def make(env_id: str, num_envs: int = 1, max_episode_steps: int | None = None):
    """Creates ``num_envs`` environments of ``env_id`` (see the module docstring)."""
    if num_envs <= 0:
        raise ValueError(f"num_envs must be > 0, got {num_envs}")
    source, name = parse_env_id(env_id)
    with _building(env_id):
        if source == "gymnax":
            import gymnax

            env, params = gymnax.make(name)
            return JaxEnv(env, params, num_envs, max_episode_steps, env_id)
        if source == "gym":
            return _make_gym(env_id, name, num_envs, max_episode_steps)
        target = _HERON_ENVS[name] if source == "heron" else _resolve_custom(env_id)
        made = _custom_env(env_id, target)
        if isinstance(made, tuple):
            return _jax_env(env_id, *made, num_envs, max_episode_steps)
        return _gym_from_factory(env_id, target, made, num_envs, max_episode_steps)


def _refuse_placeholders(env_id: str, name: str) -> None:
    """gymnasium keeps ids for old code whose entry point only raises: say why up front."""
    import gymnasium

    entry_point = getattr(gymnasium.spec(name).entry_point, "__name__", "")
    if entry_point == "_raise_mujoco_py_error":
        raise EnvUnavailableError(
            f"{env_id} is not supported: gymnasium's mujoco-py based v2/v3 environments "
            "moved to gymnasium-robotics; use the v5 id (it needs MuJoCo: "
            'pip install "gymnasium[mujoco]")'
        )
    if entry_point == "_raise_shimmy_error":
        raise EnvUnavailableError(
            f"{env_id} is not supported: it wraps an environment of the old gym package "
            "(through shimmy) and needs arguments heron does not pass; register your own id "
            "or use module.path:Attribute"
        )


def _make_gym(env_id: str, name: str, num_envs: int, max_episode_steps: int | None):
    import gymnasium

    _refuse_placeholders(env_id, name)
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    limit = max_episode_steps or gymnasium.spec(name).max_episode_steps

    def make_vector_env(n: int):
        return gymnasium.make_vec(name, num_envs=n, **kwargs)

    return GymEnv(make_vector_env, num_envs, env_id, limit)


# --------------------------------------------------------------------------- build errors

_GYMNASIUM_EXTRA = re.compile(r"gymnasium\[([\w-]+)\]")
_NOT_INSTALLED = re.compile(r"^(\S+) is not installed")


def _missing_dependency(env_id: str, error: Exception) -> str:
    """One line naming the package gymnasium says is missing and the pip extra."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    package = _NOT_INSTALLED.match(message)
    extra = _GYMNASIUM_EXTRA.search(message)
    if package and extra:
        swig = " (Box2D builds with swig: `pip install swig` first)" if extra[1] == "box2d" else ""
        return (
            f"cannot make {env_id}: it needs {package[1]}, which is not installed; install "
            f'gymnasium\'s {extra[1]} extra: pip install "gymnasium[{extra[1]}]"{swig}'
        )
    return f"cannot make {env_id}: {message}"


def _download_failure(env_id: str, error: Exception) -> str:
    what = _DOWNLOADS.get(env_id, "data")
    reason = getattr(error, "reason", None) or error
    return (
        f"cannot make {env_id}: it downloads {what} when it is made, and the download failed "
        f"({reason}); ids that need network access are not supported offline"
    )


@contextlib.contextmanager
def _building(env_id: str):
    """Turns the ways an id fails to build into one EnvUnavailableError line."""
    import urllib.error

    import gymnasium

    try:
        yield
    except gymnasium.error.DependencyNotInstalled as error:
        raise EnvUnavailableError(_missing_dependency(env_id, error)) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise EnvUnavailableError(_download_failure(env_id, error)) from None
    except ImportError as error:
        message = _first_line(error).partition(": ")[2]
        if isinstance(error, ModuleNotFoundError) and error.name:
            raise EnvUnavailableError(
                f"cannot make {env_id}: it needs the Python package {error.name!r}, which is "
                "not installed"
            ) from None
        raise EnvUnavailableError(f"cannot make {env_id}: {message}") from None
    except gymnasium.error.Error as error:
        raise EnvUnavailableError(f"cannot make {env_id}: {_first_line(error)}") from None
    except Exception as error:
        if not raised_by_user(error):
            raise
        raise EnvironmentRaised(env_id, "its constructor", error) from None


def _masked_cartpole():
    import_gymnax()
    from heron.envs.classic import masked_cartpole

    return masked_cartpole()


_BUILTIN_ENVS = {"CartPole-masked-v1": _masked_cartpole}


def _register_builtin() -> None:
    for env_id, factory in _BUILTIN_ENVS.items():
        register(env_id, factory)


def is_builtin(env_id: str) -> bool:
    """Whether ``env_id`` is made by gymnax's or heron's own code (not by a user's module,
    nor by a factory registered under one of heron's ids), so it is as pinned as they are."""
    source, _, name = env_id.partition(":")
    if source == "gymnax":
        return True
    return (
        source == "heron" and name in _BUILTIN_ENVS and _HERON_ENVS.get(name) is _BUILTIN_ENVS[name]
    )


_register_builtin()

from heron.envs.check import EnvCheck, check  # noqa: E402  (check.py uses the names above)

__all__ = [
    "CUSTOM",
    "EnvCheck",
    "EnvUnavailableError",
    "GymEnv",
    "JaxEnv",
    "UnknownEnvError",
    "check",
    "import_env_module",
    "id_of",
    "is_builtin",
    "make",
    "make_one",
    "parse_env_id",
    "register",
]
