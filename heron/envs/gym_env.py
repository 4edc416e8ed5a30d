"""Gymnasium vector environments stepped on the host, behind heron's TimeStep protocol.

Gymnasium 1.x "next-step" auto-reset matches heron's convention exactly: the step that
ends an episode returns its final observation (heron's LAST step), and the following
``step`` call resets that sub-environment, ignores its action and returns the first
observation with reward 0 (heron's FIRST step).
"""

from __future__ import annotations

import gymnasium
import jax
import numpy as np

from heron.specs import EnvSpec, action_spec_from_space, observation_shape_from_space
from heron.types import StepType, TimeStep


class GymEnv:
    """A Gymnasium vector env; ``reset`` / ``step`` mirror JaxEnv's, with host state."""

    is_jax = False

    def __init__(self, make_vector_env, num_envs: int, name: str, max_episode_steps=None):
        self.name = name
        self.num_envs = num_envs
        self._make_vector_env = make_vector_env
        self._env = make_vector_env(num_envs)
        autoreset = self._env.metadata.get("autoreset_mode")
        if autoreset is not None and autoreset != gymnasium.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(f"{name}: heron needs next-step auto-reset, the env uses {autoreset}")
        obs_space = self._env.single_observation_space
        self.spec = EnvSpec(
            observation_shape=observation_shape_from_space(obs_space),
            observation_dtype=np.float32,
            action=action_spec_from_space(self._env.single_action_space),
            max_episode_steps=max_episode_steps,
        )
        self._needs_reset = np.zeros(num_envs, bool)

    def with_num_envs(self, num_envs: int) -> GymEnv:
        return GymEnv(self._make_vector_env, num_envs, self.name, self.spec.max_episode_steps)

    def close(self):
        self._env.close()

    def reset(self, key) -> tuple[None, TimeStep]:
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        obs, _ = self._env.reset(seed=seed)
        self._needs_reset = np.zeros(self.num_envs, bool)
        n = self.num_envs
        return None, TimeStep(
            step_type=np.full(n, StepType.FIRST, np.int32),
            reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32),
            observation=np.asarray(obs, np.float32),
        )

    def step(self, state, action, key=None) -> tuple[None, TimeStep]:
        action = np.asarray(action)
        if self.spec.action.is_discrete:
            action = action.astype(np.int64)
        else:  # Gaussian samples may leave the bounds
            action = np.clip(action, *self.spec.action.bounds)
        obs, reward, terminated, truncated, _ = self._env.step(action)
        reset = self._needs_reset
        last = np.logical_or(terminated, truncated) & ~reset
        self._needs_reset = last
        step_type = np.where(reset, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID))
        return None, TimeStep(
            step_type=step_type.astype(np.int32),
            reward=np.where(reset, 0.0, reward).astype(np.float32),
            discount=np.where(np.asarray(terminated) & ~reset, 0.0, 1.0).astype(np.float32),
            observation=np.asarray(obs, np.float32),
        )
