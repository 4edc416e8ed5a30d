"""Shared fixtures: tiny hand-made environments with known episodes, in both env kinds.

CountingEnv: the observation is the step counter t (0 at reset), every step pays reward 1,
and the episode terminates when the agent takes action 1 (discrete) — otherwise it is
truncated by the time limit. Final observations (t at the end) and first ones (0) differ, so
a test can tell which one a learner bootstraps from.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from heron import envs
from heron.cli import configure_compile_cache

configure_compile_cache()  # as the CLI does: repeated programs compile once

# Modules whose module-scoped fixtures are expensive (a Ray instance and its baseline run,
# the two-device subprocess, the world-model runs), each kept on one pytest-xdist worker so
# that those fixtures run once. pytest-xdist's own xdist_group marks cannot do it under
# pytest 9: xdist 3.8 tags a test by rewriting ``item._nodeid``, which pytest 9 no longer
# reads, so every test of such a module went to whichever worker was free, and each worker
# built the fixtures again (two Ray instances on 2 cores).
ONE_WORKER_MODULES = ("test_distributed.py", "test_parallel.py", "test_world_model.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (``make test``): the modules above each as one unit of work,
    every other test on its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.rsplit("/", 1)[-1] in ONE_WORKER_MODULES else nodeid

    return ModulesOnOneWorker(config, log)


TIME_LIMIT = 3


@struct.dataclass
class CountingState(environment.EnvState):
    time: int


@struct.dataclass
class CountingParams(environment.EnvParams):
    max_steps_in_episode: int = TIME_LIMIT


class CountingJaxEnv(environment.Environment):
    @property
    def default_params(self):
        return CountingParams()

    def step_env(self, key, state, action, params):
        del key
        time = state.time + 1
        new_state = CountingState(time=time)
        terminated = jnp.asarray(action) == 1
        return self.get_obs(new_state), new_state, jnp.float32(1.0), terminated, {}

    def reset_env(self, key, params):
        del key
        state = CountingState(time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.time], jnp.float32)

    def is_terminated(self, state, params):
        return jnp.array(False)

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (1,), jnp.float32)


class CountingGymEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._time = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self._time += 1
        return np.array([self._time], np.float32), 1.0, bool(action == 1), False, {}


envs.register("Counting-v0", lambda: (CountingJaxEnv(), CountingParams()))
gymnasium.register("HeronCounting-v0", entry_point=CountingGymEnv, max_episode_steps=TIME_LIMIT)

COUNTING_IDS = ["heron:Counting-v0", "gym:HeronCounting-v0"]


@pytest.fixture(params=COUNTING_IDS)
def counting_env_id(request) -> str:
    return request.param


def rollout(env, actions: Any) -> list:
    """Steps ``env`` (reset first) through ``actions`` [T, B]; returns the T+1 TimeSteps."""
    state, timestep = env.reset(jax.random.PRNGKey(0))
    steps = [timestep]
    for t, action in enumerate(actions):
        state, timestep = env.step(state, jnp.asarray(action), jax.random.PRNGKey(t + 1))
        steps.append(jax.tree.map(np.asarray, timestep))
    return [jax.tree.map(np.asarray, s) for s in steps]
