"""Environments with Brax's protocol (``brax:`` and ``playground:``): ``reset(rng) -> State``
and ``step(state, action) -> State`` with ``State.obs``, ``State.reward`` and ``State.done``,
actions in [-1, 1]. Seen as a gymnax environment, heron's JaxEnv batches them, auto-resets
them and applies their time limit, so they compile into the iteration as gymnax's do.

The raw environment is wrapped, not Brax's training wrappers (EpisodeWrapper,
AutoResetWrapper): ``done`` is then termination only, and truncation stays heron's. A dict
observation (Playground's ``state`` beside ``privileged_state``) is a gymnax Dict space,
served as heron serves Dict observations (each key a part of the flattened observation)."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from heron.envs.adapters import import_gymnax
from heron.envs.errors import UnknownEnvError

_gymnax = import_gymnax()


def _box(observation):
    """The gymnax Box of an observation (a ShapeDtypeStruct): uint8 images in [0, 255],
    unbounded float32 values otherwise."""
    if observation.dtype == jnp.uint8:
        return _gymnax.environments.spaces.Box(0, 255, observation.shape, jnp.uint8)
    return _gymnax.environments.spaces.Box(-jnp.inf, jnp.inf, observation.shape, jnp.float32)


class BraxStyleEnvironment(_gymnax.environments.environment.Environment):
    """A Brax-style ``env`` as gymnax sees environments; its state is the wrapped ``State``."""

    def __init__(self, env, episode_length: int, env_id: str):
        super().__init__()
        observation = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
        if isinstance(observation, Mapping):  # Playground's {"state", "privileged_state"}
            self._observation_space = _gymnax.environments.spaces.Dict(
                {key: _box(part) for key, part in observation.items()}
            )
        elif observation.ndim != 1:
            raise UnknownEnvError(
                f"{env_id} observes an array of shape {observation.shape}; heron takes a "
                "vector from Brax-style environments"
            )
        else:
            self._observation_space = _box(observation)
        self._env = env
        self._episode_length = episode_length
        self._env_id = env_id

    @property
    def name(self) -> str:
        return self._env_id

    @property
    def default_params(self):
        return _gymnax.environments.environment.EnvParams(max_steps_in_episode=self._episode_length)

    def reset_env(self, key, params):
        state = self._env.reset(key)
        return state.obs, state

    def step_env(self, key, state, action, params):
        state = self._env.step(state, action)
        return state.obs, state, state.reward, state.done > 0.5, {}

    def observation_space(self, params):
        return self._observation_space

    def action_space(self, params):
        return _gymnax.environments.spaces.Box(-1.0, 1.0, (self._env.action_size,), jnp.float32)
