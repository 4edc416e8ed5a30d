"""``heron:LegalChoice-v0``: a small JAX environment whose legal actions change every step,
given by its ``action_mask`` (how heron reads a gymnax environment's action masks).

Each step shows a value in [0, 1) for each of 10 actions, of which a random 3 are legal. A
legal action earns its value; an illegal one ends the episode with reward -1. Episodes are
cut after 20 steps (the time limit, a truncation). The observation holds the values only,
not which actions are legal: an agent that acts on the mask never ends an episode early (a
random legal choice earns about 20 x 0.5 = 10 an episode, the best legal one 20 x 0.75 =
15), one that does not survives a step with probability 3/10.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from heron.envs.adapters import import_gymnax

_gymnax = import_gymnax()  # not `import gymnax`: that loads its drawing libraries (seconds)
environment, spaces = _gymnax.environments.environment, _gymnax.environments.spaces

ACTIONS, LEGAL, STEPS = 10, 3, 20


@struct.dataclass
class LegalChoiceState(environment.EnvState):
    values: jax.Array  # float32 [ACTIONS]: what each action earns if legal
    legal: jax.Array  # bool [ACTIONS]


@struct.dataclass
class LegalChoiceParams(environment.EnvParams):
    max_steps_in_episode: int = STEPS


class LegalChoice(environment.Environment):
    @property
    def default_params(self) -> LegalChoiceParams:
        return LegalChoiceParams()

    def _draw(self, key, time):
        value_key, legal_key = jax.random.split(key)
        legal = jnp.zeros(ACTIONS, bool).at[jax.random.permutation(legal_key, ACTIONS)[:LEGAL]]
        return LegalChoiceState(
            time=time,
            values=jax.random.uniform(value_key, (ACTIONS,)),
            legal=legal.set(True),
        )

    def reset_env(self, key, params):
        state = self._draw(key, 0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        legal = state.legal[action]
        reward = jnp.where(legal, state.values[action], -1.0)
        next_state = self._draw(key, state.time + 1)
        return self.get_obs(next_state), next_state, reward, ~legal, {}

    def get_obs(self, state, params=None, key=None):
        return state.values

    def action_mask(self, state, params):
        """The actions legal in ``state`` (heron reads a gymnax environment's masks here)."""
        return state.legal

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (ACTIONS,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(ACTIONS)

    @property
    def name(self) -> str:
        return "LegalChoice-v0"

    @property
    def num_actions(self) -> int:
        return ACTIONS


def legal_choice():
    env = LegalChoice()
    return env, env.default_params
