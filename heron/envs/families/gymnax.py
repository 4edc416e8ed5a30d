"""``gymnax:<id>``: gymnax's environments, pure JAX, compiled with the agent."""

from __future__ import annotations

from heron.envs.adapters import import_gymnax
from heron.envs.family import Family, find_in
from heron.envs.jax_env import JaxEnv


def _ids() -> list[str]:
    return list(import_gymnax().registered_envs)


def _make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None) -> JaxEnv:
    env, params = import_gymnax().make(name)
    return JaxEnv(env, params, num_envs, max_episode_steps, env_id)


def _make_one(env_id: str, name: str):
    return import_gymnax().make(name)


FAMILY = Family(
    prefix="gymnax",
    form="'gymnax:<id>' (e.g. gymnax:CartPole-v1)",
    find=find_in(_ids),
    make=_make,
    make_one=_make_one,
    jax_native=True,
    traced_libraries=("gymnax",),
    is_builtin=lambda name: True,  # gymnax is pinned
    downloads={"MNISTBandit-bsuite": "the MNIST data set"},
)
