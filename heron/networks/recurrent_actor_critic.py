"""Recurrent policies and critics for off-policy agents (recurrent CRR and SVG0).

Each network steps once: (state, inputs [..., ...], first [...]) -> (state, outputs), with a
LayerNormMLP torso before an LSTM or GRU core whose state is reset to zeros wherever
``first`` is true (an episode starts there). Leading batch dimensions are arbitrary, so a
state tiled over N action samples [N, B, size] steps N candidates at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp

from heron.networks.actor_critic import _LOG_STD_RANGE, LayerNormMLP, state_action
from heron.networks.recurrent import reset_where, zero_core_state
from heron.specs import ActionSpec


class _Core(nn.Module):
    core: Literal["lstm", "gru"]
    core_size: int
    hidden_sizes: Sequence[int]

    @nn.compact
    def __call__(self, state, inputs, first):
        features = LayerNormMLP(self.hidden_sizes)(inputs)
        cell = nn.OptimizedLSTMCell if self.core == "lstm" else nn.GRUCell
        zeros = zero_core_state(self.core, first.shape, self.core_size)
        return cell(self.core_size)(reset_where(first, state, zeros), features)


class RecurrentPolicy(nn.Module):
    """(state, observation [..., obs], first [...]) -> (state, dist params), the heads of
    ``actor_critic.Policy``: logits [..., n] or {mean, log_std} [..., d]."""

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (256, 256)
    core: Literal["lstm", "gru"] = "lstm"
    core_size: int = 128

    def initial_state(self, batch_shape):
        return zero_core_state(self.core, batch_shape, self.core_size)

    @nn.compact
    def __call__(self, state, observation, first):
        state, features = _Core(self.core, self.core_size, self.hidden_sizes)(
            state, observation, first
        )
        if self.spec.is_discrete:
            logits = nn.Dense(self.spec.n_actions, kernel_init=nn.initializers.zeros)(features)
            return state, logits
        size = len(self.spec.low)
        mean = nn.Dense(
            size, kernel_init=nn.initializers.variance_scaling(1e-4, "fan_in", "uniform")
        )(features)
        log_std = nn.Dense(size, kernel_init=nn.initializers.zeros)(features)
        return state, {"mean": mean, "log_std": jnp.clip(log_std, *_LOG_STD_RANGE)}


class RecurrentCritic(nn.Module):
    """(state, observation [..., obs], action [..., d], first [...]) -> (state, output): the
    logits [..., num_atoms] of a categorical Q when ``num_atoms`` is set, else Q [...]."""

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (256, 256)
    core: Literal["lstm", "gru"] = "lstm"
    core_size: int = 128
    num_atoms: int | None = None

    def initial_state(self, batch_shape):
        return zero_core_state(self.core, batch_shape, self.core_size)

    @nn.compact
    def __call__(self, state, observation, action, first):
        state, features = _Core(self.core, self.core_size, self.hidden_sizes)(
            state, state_action(self.spec, observation, action), first
        )
        if self.num_atoms is None:
            return state, nn.Dense(1)(features)[..., 0]
        return state, nn.Dense(self.num_atoms, kernel_init=nn.initializers.zeros)(features)
