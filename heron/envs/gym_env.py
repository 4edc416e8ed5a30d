"""Gymnasium vector environments behind heron's TimeStep protocol, callable from compiled
code: ``reset`` and ``step`` reach the host environment through a host callback (``jax.
experimental.buffer_callback``), so a training iteration with a Gymnasium env compiles
whole like one with a JAX env (the host steps the environment when the compiled loop asks
it to, and writes the step into the program's buffers).

Gymnasium 1.x "next-step" auto-reset matches heron's convention exactly: the step that
ends an episode returns its final observation (heron's LAST step), and the following
``step`` call resets that sub-environment, ignores its action and returns the first
observation with reward 0 (heron's FIRST step).

The host environment's state lives outside JAX: it cannot be saved in a checkpoint, and two
compiled programs that step the same GymEnv share it. ``restart`` is how a resumed run (or
a restarted actor) continues: the next ``step`` resets every sub-environment, ignores its
action and returns FIRST steps, as an auto-reset does, so the new episodes' first steps are
collected like any other.
"""

from __future__ import annotations

import logging

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jax.experimental.buffer_callback import buffer_callback

from heron.envs.errors import EnvironmentRaised, raised_in
from heron.specs import (
    EnvSpec,
    action_spec_from_space,
    flatten_observation,
    observation_categories_from_space,
    observation_dtype_from_space,
    observation_parts_from_space,
    observation_shape_from_space,
)
from heron.types import StepType, TimeStep


class _QuietCallbackLog(logging.Filter):
    """Keeps JAX from logging the traceback of an environment's exception in a callback:
    heron reports it in one line (``GymEnv.take_failure``)."""

    def filter(self, record):
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, EnvironmentRaised)


logging.getLogger("jax._src.callback").addFilter(_QuietCallbackLog())


class GymEnv:
    """A Gymnasium vector env; ``reset`` / ``step`` mirror JaxEnv's (the state is a dummy)."""

    is_jax = False
    _failure: EnvironmentRaised | None = None  # the latest, of any GymEnv in this process

    def __init__(self, make_vector_env, num_envs: int, name: str, max_episode_steps=None):
        self.name = name
        self.num_envs = num_envs
        self._make_vector_env = make_vector_env
        with raised_in(name, "its constructor"):
            self._env = make_vector_env(num_envs)
        autoreset = self._env.metadata.get("autoreset_mode")
        if autoreset is not None and autoreset != gymnasium.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(f"{name}: heron needs next-step auto-reset, the env uses {autoreset}")
        obs_space = self._env.single_observation_space
        action = action_spec_from_space(self._env.single_action_space)
        observation_shape = observation_shape_from_space(obs_space)  # before any reset
        self._masks_from = self._find_action_masks() if action.is_discrete else None
        self.spec = EnvSpec(
            observation_shape=observation_shape,
            observation_dtype=observation_dtype_from_space(obs_space),
            action=action,
            max_episode_steps=max_episode_steps,
            observation_categories=observation_categories_from_space(obs_space),
            action_mask=self._masks_from is not None,
            observation_parts=observation_parts_from_space(obs_space),
        )
        self._needs_reset = np.zeros(num_envs, bool)
        self._restart_seed: int | None = None
        action = self.spec.action
        self._action_bounds = None if action.is_discrete else action.bounds  # once, not per step
        n = num_envs
        self._timestep_shapes = TimeStep(
            step_type=jax.ShapeDtypeStruct((n,), jnp.int32),
            reward=jax.ShapeDtypeStruct((n,), jnp.float32),
            discount=jax.ShapeDtypeStruct((n,), jnp.float32),
            observation=jax.ShapeDtypeStruct(
                (n,) + self.spec.observation_shape, self.spec.observation_dtype
            ),
            action_mask=(
                jax.ShapeDtypeStruct((n,) + self.spec.action_mask_shape, jnp.bool_)
                if self.spec.action_mask
                else ()
            ),
        )

    def _find_action_masks(self) -> str | None:
        """Where the environment says which actions are legal: ``"info"`` (Gymnasium's
        ``info["action_mask"]``), ``"method"`` (sb3-contrib's ``action_masks()``) or None.
        Found on a reset here, before the run's own seeded reset."""
        with raised_in(self.name, "reset"):
            _, info = self._env.reset()
        if "action_mask" in info:
            return "info"
        if not hasattr(self._env, "call"):  # a vector env of its own (CartPole's, ALE's)
            return None
        try:
            masks = self._env.call("action_masks")
        except AttributeError:  # no such method or attribute
            return None
        return "method" if all(mask is not None for mask in masks) else None

    def _action_masks(self, info):
        """The legal actions [B, *action_mask_shape] after a reset or step; () without masks.
        A sub-environment whose info has no mask (``_action_mask`` False) allows every action."""
        if self._masks_from is None:
            return ()
        shape = (self.num_envs,) + self.spec.action_mask_shape
        if self._masks_from == "method":
            masks = np.stack(self._recorded("action_masks", self._env.call, "action_masks"))
            return masks.astype(bool).reshape(shape)
        masks = np.ones(shape, bool)
        if "action_mask" in info:
            given = np.asarray(info.get("_action_mask", np.ones(self.num_envs, bool)), bool)
            values = np.asarray(info["action_mask"])
            masks[given] = np.stack([np.asarray(v, bool) for v in values[given]]).reshape(
                (-1,) + self.spec.action_mask_shape
            )
        return masks

    def with_num_envs(self, num_envs: int) -> GymEnv:
        """Another host environment of the same id with ``num_envs`` sub-environments."""
        return GymEnv(self._make_vector_env, num_envs, self.name, self.spec.max_episode_steps)

    def close(self):
        self._env.close()

    def reset(self, key) -> tuple[jax.Array, TimeStep]:
        seed = jax.random.randint(key, (), 0, 2**31 - 1)
        return jnp.zeros((), jnp.int32), self._host_call(self._host_reset, seed)

    def step(self, state, action, key=None) -> tuple[jax.Array, TimeStep]:
        del key
        return state, self._host_call(self._host_step, action)

    def _host_call(self, host_function, argument) -> TimeStep:
        """``host_function(argument)``'s TimeStep, written by the host into the compiled
        program's own output buffers (``buffer_callback``: an ``io_callback`` also copies its
        result into new device arrays, which costs ten times the call on an idle CPU and more
        beside the program's threaded compute)."""

        def into_buffers(context, out: TimeStep, argument) -> None:
            del context
            values = jax.tree.leaves(host_function(np.asarray(argument)))
            for buffer, value in zip(jax.tree.leaves(out), values, strict=True):
                np.asarray(buffer)[...] = value

        call = buffer_callback(
            into_buffers, self._timestep_shapes, has_side_effect=True, vmap_method="sequential"
        )
        return call(argument)

    def restart(self, state, key) -> jax.Array:
        """Every sub-environment starts a new episode at the next ``step`` (seeded from
        ``key``), which returns their FIRST steps."""
        seed = jax.random.randint(key, (), 0, 2**31 - 1)
        io_callback(self._host_restart, None, seed)
        return state

    def _host_restart(self, seed) -> None:
        self._restart_seed = int(seed)

    @classmethod
    def take_failure(cls) -> EnvironmentRaised | None:
        """What a Gymnasium environment raised in a host callback since the last call (the
        compiled program that called it fails with a generic runtime error)."""
        failure, cls._failure = cls._failure, None
        return failure

    def _recorded(self, call: str, function, *args, **kwargs):
        try:
            with raised_in(self.name, call):
                return function(*args, **kwargs)
        except EnvironmentRaised as error:
            GymEnv._failure = error
            raise

    def _host_reset(self, seed) -> TimeStep:
        self._restart_seed = None
        obs, info = self._recorded("reset", self._env.reset, seed=int(seed))
        self._reset_info(info)
        self._needs_reset = np.zeros(self.num_envs, bool)
        n = self.num_envs
        return TimeStep(
            step_type=np.full(n, StepType.FIRST, np.int32),
            reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32),
            observation=self._observations(obs),
            action_mask=self._action_masks(info),
        )

    def _observations(self, obs) -> np.ndarray:
        """The sub-environments' observations as one array [B, *observation_shape] (a Dict
        or Tuple observation flattened)."""
        spec = self.spec
        if spec.observation_parts:
            return flatten_observation(spec.observation_parts, obs, 1, spec.observation_dtype)
        return np.asarray(obs, spec.observation_dtype)

    def _reset_info(self, info) -> None:
        """Reads what a subclass needs of the reset's ``info``."""

    def _bootstrap_ends(self, info) -> np.ndarray | bool:
        """Where a step that goes on with its episode still ends bootstrapping (discount 0):
        a subclass's reading of the step's ``info`` (an Atari game's lost life)."""
        return False

    def _executed_actions(self, action: np.ndarray) -> np.ndarray:
        """The discrete actions the environment is given for the agent's ``action``: the
        same, unless a subclass plays some itself (an Atari game's FIRE after a lost life)."""
        return action

    def _host_step(self, action) -> TimeStep:
        if self._restart_seed is not None:
            return self._host_reset(self._restart_seed)
        if self._action_bounds is None:
            action = self._executed_actions(action.astype(np.int64))
        else:  # Gaussian samples may leave the bounds
            action = np.clip(action, *self._action_bounds)
        obs, reward, terminated, truncated, info = self._recorded("step", self._env.step, action)
        reset = self._needs_reset
        last = np.logical_or(terminated, truncated) & ~reset
        self._needs_reset = last
        step_type = np.where(reset, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID))
        cut = (np.asarray(terminated) | self._bootstrap_ends(info)) & ~reset
        return TimeStep(
            step_type=step_type.astype(np.int32),
            reward=np.where(reset, 0.0, reward).astype(np.float32),
            discount=np.where(cut, 0.0, 1.0).astype(np.float32),
            observation=self._observations(obs),
            action_mask=self._action_masks(info),
        )
