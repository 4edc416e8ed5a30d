"""``gym:<id>``: Gymnasium's registry (ids registered by a module of yours included), stepped
on the host. Ids gymnasium keeps only for old code are refused up front."""

from __future__ import annotations

from heron.envs.errors import EnvUnavailableError
from heron.envs.family import Family, find_in
from heron.envs.gym_env import GymEnv


def _ids() -> list[str]:
    import gymnasium

    return sorted(gymnasium.registry.keys())


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


def _make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None) -> GymEnv:
    import gymnasium

    _refuse_placeholders(env_id, name)
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    limit = max_episode_steps or gymnasium.spec(name).max_episode_steps

    def make_vector_env(n: int):
        return gymnasium.make_vec(name, num_envs=n, **kwargs)

    return GymEnv(make_vector_env, num_envs, env_id, limit)


def _make_one(env_id: str, name: str):
    import gymnasium

    _refuse_placeholders(env_id, name)
    return gymnasium.make(name, disable_env_checker=True)


FAMILY = Family(
    prefix="gym",
    form="'gym:<id>' (e.g. gym:Pendulum-v1)",
    find=find_in(_ids),
    make=_make,
    make_one=_make_one,
    jax_native=False,
)
