"""Environments addressed by id: ``gymnax:<id>``, ``gym:<id>`` or ``heron:<id>``.

``make(env_id, num_envs)`` returns a JaxEnv (pure reset/step, compiled with the agent) or a
GymEnv (host-stepped Gymnasium vector env). Both expose ``spec``, ``num_envs``, ``is_jax``,
``reset(key) -> (state, TimeStep)``, ``step(state, action, key) -> (state, TimeStep)`` and
``with_num_envs(n)``.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.envs.gym_env import GymEnv
from heron.envs.jax_env import JaxEnv

SOURCES = ("gymnax", "gym", "heron")

# heron's own JAX environments: id -> factory() returning (gymnax-style env, params).
_HERON_ENVS: dict[str, Callable] = {}


class UnknownEnvError(ValueError):
    """An environment id heron cannot resolve."""


def register(env_id: str, factory: Callable) -> None:
    """Registers ``heron:<env_id>``; ``factory()`` returns a gymnax-style (env, params)."""
    _HERON_ENVS[env_id] = factory


def _naming_help() -> str:
    return (
        "environment ids carry their source: 'gymnax:<id>' (e.g. gymnax:CartPole-v1), "
        "'gym:<id>' (e.g. gym:Pendulum-v1) or 'heron:<id>'"
    )


def _gymnax_ids() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def _gym_ids() -> list[str]:
    import gymnasium

    return sorted(gymnasium.registry.keys())


def parse_env_id(env_id: str) -> tuple[str, str]:
    """Splits ``source:name`` and checks the source and the name exist."""
    source, sep, name = env_id.partition(":")
    if not sep or source not in SOURCES or not name:
        raise UnknownEnvError(f"unknown environment {env_id!r}: {_naming_help()}")
    known = {"gymnax": _gymnax_ids, "gym": _gym_ids, "heron": lambda: sorted(_HERON_ENVS)}[source]()
    if name not in known:
        raise UnknownEnvError(
            f"unknown {source} environment {name!r} in {env_id!r}; {source} ids: "
            f"{', '.join(known[:40])}{', ...' if len(known) > 40 else ''}"
        )
    return source, name


def make(env_id: str, num_envs: int = 1, max_episode_steps: int | None = None):
    """Creates ``num_envs`` environments of ``env_id`` (see the module docstring)."""
    if num_envs <= 0:
        raise ValueError(f"num_envs must be > 0, got {num_envs}")
    source, name = parse_env_id(env_id)
    if source == "gymnax":
        import gymnax

        env, params = gymnax.make(name)
        return JaxEnv(env, params, num_envs, max_episode_steps, env_id)
    if source == "heron":
        env, params = _HERON_ENVS[name]()
        return JaxEnv(env, params, num_envs, max_episode_steps, env_id)
    return _make_gym(env_id, name, num_envs, max_episode_steps)


def _make_gym(env_id: str, name: str, num_envs: int, max_episode_steps: int | None):
    import gymnasium

    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    limit = max_episode_steps or gymnasium.spec(name).max_episode_steps

    def make_vector_env(n: int):
        return gymnasium.make_vec(name, num_envs=n, **kwargs)

    return GymEnv(make_vector_env, num_envs, env_id, limit)


def _register_builtin() -> None:
    from heron.envs.classic import masked_cartpole

    register("CartPole-masked-v1", masked_cartpole)


_register_builtin()

__all__ = ["GymEnv", "JaxEnv", "UnknownEnvError", "make", "parse_env_id", "register"]
