"""A user's module that registers an environment family when imported (``--env-module``):
``toy:Counter`` (custom_envs' gymnax pair, compiled with the agent) and ``toy:Tiny`` (its
gymnasium.Env, stepped on the host), made with heron's public JaxEnv and GymEnv."""

from __future__ import annotations

import gymnasium
from custom_envs import LIMIT, TinyEnv, counter_pair

from heron import envs
from heron.envs.family import find_in

_MADE_BY = {"Counter": counter_pair, "Tiny": TinyEnv}


def _make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None):
    if name == "Counter":
        env, params = counter_pair()
        return envs.JaxEnv(env, params, num_envs, max_episode_steps, env_id)
    limit = max_episode_steps or LIMIT

    def make_vector_env(n: int):
        return gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.wrappers.TimeLimit(TinyEnv(), limit)] * n
        )

    return envs.GymEnv(make_vector_env, num_envs, env_id, limit)


def _make_one(env_id: str, name: str):
    return _MADE_BY[name]()


FAMILY = envs.Family(
    prefix="toy",
    find=find_in(lambda: sorted(_MADE_BY)),
    make=_make,
    make_one=_make_one,
    jax_native=True,
)
envs.register_family(FAMILY)
