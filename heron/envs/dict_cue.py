"""``heron:DictCue-v0``: a small JAX environment with a Dict observation whose every part
matters, how heron serves Dict and Tuple observation spaces.

Each step shows three parts: ``cue``, a category in {0, 1, 2} (Discrete(3)); ``picture``, a
3x3 uint8 image with one lit pixel (255) in a random cell; ``sign``, a value in [-1, 1)
(Box). Of the three actions, the one numbered (cue + the lit pixel's column + [sign > 0])
mod 3 earns 1, the others 0; the lit pixel's row is noise. Episodes are cut after 10 steps
(the time limit, a truncation). An agent reading every part earns 10 an episode; one that
ignores the cue or the picture guesses among three (about 3.3), one that ignores the sign
among two (5 at best).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from heron.envs.adapters import import_gymnax

_gymnax = import_gymnax()  # not `import gymnax`: that loads its drawing libraries (seconds)
environment, spaces = _gymnax.environments.environment, _gymnax.environments.spaces

CHOICES, SIDE, STEPS = 3, 3, 10


@struct.dataclass
class DictCueState(environment.EnvState):
    cue: jax.Array  # int32 []
    cell: jax.Array  # int32 []: the lit pixel, row * SIDE + column
    sign: jax.Array  # float32 [1]


@struct.dataclass
class DictCueParams(environment.EnvParams):
    max_steps_in_episode: int = STEPS


def answer(cue, column, sign):
    """The action that earns 1."""
    return (cue + column + (sign > 0).astype(jnp.int32)) % CHOICES


class DictCue(environment.Environment):
    @property
    def default_params(self) -> DictCueParams:
        return DictCueParams()

    def _draw(self, key, time):
        cue_key, cell_key, sign_key = jax.random.split(key, 3)
        return DictCueState(
            time=time,
            cue=jax.random.randint(cue_key, (), 0, CHOICES),
            cell=jax.random.randint(cell_key, (), 0, SIDE * SIDE),
            sign=jax.random.uniform(sign_key, (1,), minval=-1.0, maxval=1.0),
        )

    def reset_env(self, key, params):
        state = self._draw(key, 0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        right = action == answer(state.cue, state.cell % SIDE, state.sign[0])
        next_state = self._draw(key, state.time + 1)
        return self.get_obs(next_state), next_state, right.astype(jnp.float32), False, {}

    def get_obs(self, state, params=None, key=None):
        picture = jnp.zeros(SIDE * SIDE, jnp.uint8).at[state.cell].set(255)
        return {
            "cue": state.cue,
            "picture": picture.reshape(SIDE, SIDE, 1),
            "sign": state.sign,
        }

    def observation_space(self, params):
        return spaces.Dict(
            {
                "cue": spaces.Discrete(CHOICES),
                "picture": spaces.Box(0, 255, (SIDE, SIDE, 1), jnp.uint8),
                "sign": spaces.Box(-1.0, 1.0, (1,), jnp.float32),
            }
        )

    def action_space(self, params):
        return spaces.Discrete(CHOICES)

    @property
    def name(self) -> str:
        return "DictCue-v0"

    @property
    def num_actions(self) -> int:
        return CHOICES


def dict_cue():
    env = DictCue()
    return env, env.default_params
