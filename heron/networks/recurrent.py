"""Recurrent policy-and-value network: MLP torso -> LSTM or GRU core -> heads, one step at a
time, with the core's state reset wherever an episode starts (ALF's rule)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from heron.networks.policy_value import MLP, PolicyHead, _dense
from heron.specs import ActionSpec

CORES = ("lstm", "gru")


def zero_core_state(core: str, batch_shape: int | tuple[int, ...], size: int):
    """The initial state of one core: (c, h) for an LSTM, h for a GRU; [*batch, size] each."""
    batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
    zeros = jnp.zeros(batch_shape + (size,), jnp.float32)
    return (zeros, zeros) if core == "lstm" else zeros


def reset_where(first, state, initial):
    """``initial`` where ``first`` [...] is true, ``state`` [..., size] elsewhere."""
    return jax.tree.map(lambda s, i: jnp.where(first[..., None], i, s), state, initial)


class _Tower(nn.Module):
    core: Literal["lstm", "gru"]
    core_size: int
    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, state, observation, first):
        features = MLP(self.hidden_sizes, self.activation)(observation)
        state = reset_where(
            first, state, zero_core_state(self.core, first.shape[0], self.core_size)
        )
        cell = nn.OptimizedLSTMCell if self.core == "lstm" else nn.GRUCell
        return cell(self.core_size)(state, features)


class RecurrentPolicyValueNet(nn.Module):
    """(state, observation [B, *obs], first [B]) -> (state, (policy head output, value [B])).

    ``state`` is a tuple with one core state per tower: two with ``two_towers`` (policy and
    value keep separate memories), one when they share torso and core.
    """

    spec: ActionSpec
    core: Literal["lstm", "gru"] = "lstm"
    core_size: int = 64
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "tanh"
    two_towers: bool = True
    observation_ndim: int = 1

    def initial_state(self, batch_size: int):
        towers = 2 if self.two_towers else 1
        return tuple(zero_core_state(self.core, batch_size, self.core_size) for _ in range(towers))

    @nn.compact
    def __call__(self, state, observation, first):
        batch_shape = observation.shape[: observation.ndim - self.observation_ndim]
        observation = observation.reshape(batch_shape + (-1,)).astype(jnp.float32)
        tower = lambda: _Tower(
            self.core,
            self.core_size,
            self.hidden_sizes,  # noqa: E731
            self.activation,
        )
        policy_state, policy_features = tower()(state[0], observation, first)
        if self.two_towers:
            value_state, value_features = tower()(state[1], observation, first)
            new_state = (policy_state, value_state)
        else:
            value_features, new_state = policy_features, (policy_state,)
        value = _dense(1, 1.0)(value_features)[..., 0]
        return new_state, (PolicyHead(self.spec)(policy_features), value)
