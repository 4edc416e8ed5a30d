"""Pure-JAX environments: a gymnax environment batched over ``num_envs`` with auto-reset.

After a LAST step the next ``step`` resets that environment and returns a FIRST step (the
action is ignored), so the LAST step keeps the episode's own final observation: a
truncated episode bootstraps from it, never from the next episode's first observation.
Time limits are applied here, not by gymnax, so termination and truncation stay apart.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from heron import parallel
from heron.envs.errors import raised_in
from heron.specs import (
    EnvSpec,
    SpaceError,
    action_spec_from_space,
    check_action_masks,
    flatten_observation,
    observation_categories_from_space,
    observation_dtype_from_space,
    observation_parts_from_space,
    observation_shape_from_space,
)
from heron.types import StepType, TimeStep, first_step

_NO_LIMIT = 2**30


class JaxEnvState(NamedTuple):
    env_state: Any  # gymnax state, leaves [B, ...]
    episode_step: jax.Array  # int32 [B]: steps taken in the current episode
    needs_reset: jax.Array  # bool [B]: the previous step was LAST


class JaxEnv:
    """A batch of gymnax environments with heron's TimeStep protocol; all methods are pure."""

    is_jax = True

    def __init__(self, env, params, num_envs: int, max_episode_steps: int | None, name: str):
        if max_episode_steps is None:
            max_episode_steps = int(params.max_steps_in_episode)
        if max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be > 0, got {max_episode_steps}")
        self.name = name
        self.num_envs = num_envs
        self._env = env
        # gymnax's own time limit is lifted; heron truncates at max_episode_steps itself.
        self._params = params.replace(max_steps_in_episode=_NO_LIMIT)
        observation_space = env.observation_space(params)
        action = action_spec_from_space(env.action_space(params))
        masked = callable(getattr(env, "action_mask", None))
        self.spec = EnvSpec(
            observation_shape=observation_shape_from_space(observation_space),
            observation_dtype=observation_dtype_from_space(observation_space),
            action=action,
            max_episode_steps=max_episode_steps,
            observation_categories=observation_categories_from_space(observation_space),
            action_mask=masked,
            observation_parts=observation_parts_from_space(observation_space),
        )
        if masked:
            check_action_masks(self.spec, name)

    def with_num_envs(self, num_envs: int) -> JaxEnv:
        """The same environment with another batch size (e.g. for evaluation)."""
        clone = object.__new__(JaxEnv)
        clone.__dict__.update(self.__dict__, num_envs=num_envs)
        return clone

    def _observation(self, obs):
        spec = self.spec
        if spec.observation_parts:  # a Dict or Tuple observation, flattened
            return flatten_observation(
                spec.observation_parts, obs, 0, spec.observation_dtype, xp=jnp
            )
        observation = jnp.asarray(obs, self.spec.observation_dtype)
        return observation.reshape(self.spec.observation_shape)

    def _reset_one(self, key):
        with raised_in(self.name, "reset"):
            obs, env_state = self._env.reset_env(key, self._params)
        return env_state, self._observation(obs)

    def _action_masks(self, env_state):
        """The legal actions [B, *action_mask_shape] of each environment's state, from the
        environment's ``action_mask(state, params)``; () where it has none."""
        if not self.spec.action_mask:
            return ()

        def one(state):
            with raised_in(self.name, "action_mask"):
                mask = self._env.action_mask(state, self._params)
            shape = self.spec.action_mask_shape
            if math.prod(jnp.shape(mask)) != math.prod(shape):
                raise SpaceError(
                    f"{self.name}: action_mask gave shape {jnp.shape(mask)}, the action space "
                    f"needs {shape} (one flag per action)"
                )
            return jnp.asarray(mask, bool).reshape(shape)

        return jax.vmap(one)(env_state)

    def reset(self, key) -> tuple[JaxEnvState, TimeStep]:
        keys = jax.random.split(key, self.num_envs)
        env_state, obs = jax.vmap(self._reset_one)(keys)
        batch = (self.num_envs,)
        state = JaxEnvState(
            env_state=env_state,
            episode_step=jnp.zeros(batch, jnp.int32),
            needs_reset=jnp.zeros(batch, bool),
        )
        return state, first_step(obs, batch, self._action_masks(env_state))

    def _step_one(self, state: JaxEnvState, action, key):
        with raised_in(self.name, "step"):
            obs, env_state, reward, terminated, _ = self._env.step_env(
                key, state.env_state, action, self._params
            )
        return env_state, self._observation(obs), reward, jnp.asarray(terminated, bool)

    def _reset_where_needed(self, needs_reset, keys, env_state, obs):
        """(env_state, obs) with fresh episodes where ``needs_reset``. Only a batch with an
        environment to reset computes resets: a physics reset can cost hundreds of steps
        (Playground's CheetahRun settles for 200), and episodes that all end at the time
        limit need them once an episode, not every step."""

        def reset(_):
            fresh_state, fresh_obs = jax.vmap(self._reset_one)(keys)
            select = lambda on_reset, on_step: jax.tree.map(  # noqa: E731
                lambda a, b: jnp.where(
                    needs_reset.reshape(needs_reset.shape + (1,) * (a.ndim - 1)), a, b
                ),
                on_reset,
                on_step,
            )
            return select(fresh_state, env_state), select(fresh_obs, obs)

        any_reset = parallel.same_for_all_seeds(needs_reset.any())  # a branch, not a select
        return jax.lax.cond(any_reset, reset, lambda _: (env_state, obs), None)

    def step(self, state: JaxEnvState, action, key) -> tuple[JaxEnvState, TimeStep]:
        if not self.spec.action.is_discrete:  # Gaussian samples may leave the bounds
            action = jnp.clip(action, *self.spec.action.bounds)
        keys = jax.vmap(jax.random.split)(jax.random.split(key, self.num_envs))
        env_state, obs, reward, terminated = jax.vmap(self._step_one)(state, action, keys[:, 0])
        reset = state.needs_reset
        env_state, obs = self._reset_where_needed(reset, keys[:, 1], env_state, obs)
        episode_step = state.episode_step + 1
        last = terminated | (episode_step >= self.spec.max_episode_steps)
        new_state = JaxEnvState(
            env_state=env_state,
            episode_step=jnp.where(reset, 0, episode_step),
            needs_reset=jnp.where(reset, False, last),
        )
        timestep = TimeStep(
            step_type=jnp.where(
                reset, StepType.FIRST, jnp.where(last, StepType.LAST, StepType.MID)
            ).astype(jnp.int32),
            reward=jnp.where(reset, 0.0, jnp.asarray(reward, jnp.float32)),
            discount=jnp.where(reset | ~terminated, 1.0, 0.0).astype(jnp.float32),
            observation=obs,
            action_mask=self._action_masks(env_state),
        )
        return new_state, timestep


def batched(make_one):
    """A family's ``make`` from its ``make_one`` that gives a gymnax ``(env, params)`` pair:
    ``num_envs`` of its environments as one JaxEnv."""

    def make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None) -> JaxEnv:
        return JaxEnv(*make_one(env_id, name), num_envs, max_episode_steps, env_id)

    return make
