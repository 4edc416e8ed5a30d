"""A user's own environments, as a module outside heron (tests use it by module path:
``custom_envs:TinyEnv``), plus deliberately broken ones for ``heron check-env``.

TinyEnv: observation [t / 10, 1], reward 1 per step; action 1 terminates the episode,
otherwise it is truncated after ``LIMIT`` steps.
"""

from __future__ import annotations

import gymnasium
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

LIMIT = 4


class TinyEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observation(), {}

    def _observation(self):
        return np.array([self._t / 10, 1.0], np.float32)

    def step(self, action):
        self._t += 1
        truncated = self._t >= LIMIT and action != 1
        return self._observation(), 1.0, bool(action == 1), bool(truncated), {}


def tiny_env() -> gymnasium.Env:
    """A factory, as ``--env custom_envs:tiny_env``."""
    return TinyEnv()


@struct.dataclass
class CounterState(environment.EnvState):
    time: int


@struct.dataclass
class CounterParams(environment.EnvParams):
    max_steps_in_episode: int = LIMIT


class CounterJaxEnv(environment.Environment):
    """The JAX twin of TinyEnv, as a gymnax environment."""

    @property
    def default_params(self):
        return CounterParams()

    def reset_env(self, key, params):
        state = CounterState(time=0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = CounterState(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(1.0), jnp.asarray(action) == 1, {}

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.time / 10, 1.0], jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


def counter_pair():
    """A gymnax (env, params) factory, as ``--env custom_envs:counter_pair``."""
    env = CounterJaxEnv()
    return env, env.default_params


def not_an_env():
    return {"observation": 0}


NUMBER = 3


# --------------------------------------------------------------------------- broken envs


class WrongDtypeEnv(TinyEnv):
    """Observations float64, the space says float32."""

    def _observation(self):
        return np.array([self._t / 10, 1.0], np.float64)


class NanObservationEnv(TinyEnv):
    """A NaN in every observation after reset's."""

    def _observation(self):
        value = np.nan if self._t >= 1 else 1.0
        return np.array([self._t / 10, value], np.float32)


class UnseededResetEnv(TinyEnv):
    """reset draws from a generator of its own, not from reset's seed."""

    _rng = np.random.default_rng()

    def _observation(self):
        return np.array([self._t / 10, self._rng.uniform()], np.float32)


class OutsideSpaceEnv(TinyEnv):
    """The second entry is 2.0; the space's bound is 1.0."""

    def _observation(self):
        return np.array([self._t / 10, 2.0], np.float32)


class WrongShapeStepEnv(TinyEnv):
    """step returns observations of shape (3,); reset's are right."""

    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return np.zeros(3, np.float32), reward, terminated, truncated, info


class NoOptionsResetEnv(TinyEnv):
    """reset without the options keyword."""

    def reset(self, seed=None):
        return super().reset(seed=seed)


class OldStepEnv(TinyEnv):
    """step returns gym's 4 values (observation, reward, done, info)."""

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated or truncated, info


class BadRewardEnv(TinyEnv):
    """A reward as a list and ``terminated`` as an int."""

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, [reward], int(terminated), truncated, info


class TimeLimitAsTerminationEnv(TinyEnv):
    """Ends every episode after LIMIT steps with terminated=True (a time limit mislabelled)."""

    def step(self, action):
        observation, reward, _, _, info = super().step(0)
        return observation, reward, self._t >= LIMIT, False, info


class NanJaxEnv(CounterJaxEnv):
    """A NaN observation from step 2 on, and an observation above the space's bound."""

    def get_obs(self, state, params=None, key=None):
        value = jnp.where(state.time >= 2, jnp.nan, 0.5)
        return jnp.array([value, 3.0], jnp.float32)


class WrongShapeJaxEnv(CounterJaxEnv):
    def get_obs(self, state, params=None, key=None):
        return jnp.zeros(3, jnp.float32)


class RaisingJaxEnv(CounterJaxEnv):
    """A gymnax environment whose step is not written yet."""

    def step_env(self, key, state, action, params):
        raise NotImplementedError


class RaisingStepEnv(TinyEnv):
    """A Gymnasium environment whose simulator fails after ``fail_after`` steps (of all its
    instances in the process)."""

    fail_after = 100
    steps = 0

    def step(self, action):
        RaisingStepEnv.steps += 1
        if RaisingStepEnv.steps > self.fail_after:
            raise ValueError("the simulator diverged")
        return super().step(action)


class RaisingInitEnv(TinyEnv):
    """A Gymnasium environment that cannot be constructed here."""

    def __init__(self):
        raise RuntimeError("licence file not found")
