"""What several families share: gymnax, imported without its drawing libraries, and the
environments a class or factory makes (a gymnasium.Env or a gymnax (env, params) pair) as one
unbatched environment or as ``num_envs`` batched ones (a GymEnv or a JaxEnv)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from heron.envs.errors import UnknownEnvError
from heron.envs.gym_env import GymEnv
from heron.envs.jax_env import JaxEnv

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


def defer_drawing_libraries() -> None:
    """Makes a later ``import gymnax`` (heron's or a user's env module's) leave its
    renderers' drawing libraries unloaded until they draw (about 1.5 s of every process
    that imports gymnax)."""
    for name in _DRAWING_MODULES:
        _load_lazily(name)


def import_gymnax():
    """gymnax, without importing its renderers' drawing libraries until they draw."""
    defer_drawing_libraries()
    import gymnax

    return gymnax


def gymnax_environment_type():
    return import_gymnax().environments.environment.Environment


def make_from(env_id: str, target):
    """The gymnasium.Env or gymnax (env, params) pair that ``target`` (a class or a
    factory) makes; UnknownEnvError when it makes neither."""
    import gymnasium

    environment = gymnax_environment_type()
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


def batched_from(env_id: str, target, num_envs: int, max_episode_steps: int | None):
    """``num_envs`` environments of what ``target`` (a class or a factory) makes: a JaxEnv of
    a gymnax pair, a GymEnv of copies of a gymnasium.Env."""
    made = make_from(env_id, target)
    if isinstance(made, tuple):
        return _jax_env(env_id, *made, num_envs, max_episode_steps)
    return _gym_from_factory(env_id, target, made, num_envs, max_episode_steps)


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
