"""``one_time``: holds exactly the last collection; everything is replayed once, then cleared."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class OneTimeState(NamedTuple):
    experience: Any  # [B, T, ...]: the last collection
    filled: jax.Array  # bool: whether it holds data not yet replayed


class OneTimeReplay:
    """On-policy replay: ``add`` replaces the contents, ``replay_all`` returns them."""

    def init(self, example_experience) -> OneTimeState:
        zeros = jax.tree.map(jnp.zeros_like, example_experience)
        return OneTimeState(zeros, jnp.zeros((), bool))

    def add(self, state: OneTimeState, experience) -> OneTimeState:
        del state
        return OneTimeState(experience, jnp.ones((), bool))

    def replay_all(self, state: OneTimeState):
        return state.experience

    def clear(self, state: OneTimeState) -> OneTimeState:
        return state._replace(filled=jnp.zeros((), bool))
