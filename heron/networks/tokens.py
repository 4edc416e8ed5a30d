"""A small causal transformer over serialized histories (Trax's policy-and-value network
"operating on serialized representation", ``policy_and_value_vocab_size``).

The body reads the interleaved tokens of the last ``history`` steps,
``[o_1, a_1, ..., o_K, a_K]`` (``heron.serialization.TokenLayout``), right-aligned: at an
episode's start the missing earlier steps are padding that no position attends to. It is
one module, ``TokenBody``, under the name ``body`` in every model built on it, so a token
PPO policy (``TokenPolicyValue``: action logits and a value) and a world model
(``heron.agents.world_model``: next-token logits and a reward) share parameter paths and shapes,
and ``--init-from`` copies one into the other.

Positions are not shifted: the feature at position j has seen tokens 0..j, so the logits of
token j + 1 are read at j. Hence the logits of step t's action control c are read one
position before that control's token (they have seen o_t and the controls before c), and
step t's value at its last observation token (the step boundary of ``TokenLayout``).

    history = initial_history(layout, (B,))
    history = push(history, observation_tokens [B, O], first [B])     # a new step
    tokens, valid = window(layout, history)       # [B, K * S] int32, [B, K] bool
    ... sample control c from the logits read at layout.action_positions[-1, c] - 1 ...
    history = with_actions(history, action_tokens [B, A])
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from heron import serialization
from heron.configs import check, integer, number
from heron.serialization import TokenLayout


@dataclasses.dataclass(frozen=True)
class TokenConfig:
    """The transformer body and the serialization of observations it reads."""

    width: int = integer(64, 1)
    """Model width (embedding size); a multiple of heads."""
    depth: int = integer(2, 1)
    """Transformer blocks."""
    heads: int = integer(4, 1)
    """Attention heads per block."""
    history: int = integer(4, 1)
    """Steps of (observation, action) tokens the model reads (Trax's len_history_for_policy),
    kept in the actor's carry and reset at episode starts."""
    precision: int = integer(2, 1)
    """Digits (base vocab_size) per observation element."""
    observation_range: float = number(10.0, 0.0, low_open=True)
    """Observation elements are clipped to [-range, range] before they are written as digits
    (normalised observations: a few standard deviations)."""


def check_token_config(config: TokenConfig, prefix: str) -> None:
    """The rules joining the fields of a TokenConfig (its fields are validated by name)."""
    check(
        config.width % config.heads == 0,
        f"{prefix}.width={config.width} must be a multiple of {prefix}.heads={config.heads}",
    )


def serializations(
    observation_shape, action_spec, vocab_size: int, config: TokenConfig, categories=None
):
    """(observation serialization, action serialization, layout of ``config.history`` steps).
    Observations of ``categories`` categories (Discrete) are one exact token per element, as
    Trax writes them; others are digits. Box actions are refused
    (``heron.serialization.action_serialization``)."""
    action = serialization.action_serialization(action_spec, vocab_size)
    if categories is not None:
        size = int(np.prod(observation_shape))
        observation = serialization.multi_discrete_serialization([categories] * size, vocab_size)
    else:
        observation = serialization.box_serialization(
            tuple(observation_shape),
            vocab_size,
            config.precision,
            clip_range=(-config.observation_range, config.observation_range),
        )
    return observation, action, serialization.token_layout(observation, action, config.history)


# ----------------------------------------------------------------------------- the model


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP."""

    width: int
    heads: int

    @nn.compact
    def __call__(self, x, mask):
        attended = nn.MultiHeadDotProductAttention(num_heads=self.heads, name="attention")(
            nn.LayerNorm(name="attention_norm")(x), mask=mask
        )
        x = x + attended
        hidden = nn.gelu(nn.Dense(4 * self.width, name="mlp_in")(nn.LayerNorm(name="mlp_norm")(x)))
        return x + nn.Dense(self.width, name="mlp_out")(hidden)


class TokenBody(nn.Module):
    """tokens int32 [N, L], valid bool [N, L] -> features [N, L, width]; position j attends
    to the valid positions <= j."""

    vocab_size: int
    length: int
    config: TokenConfig

    @nn.compact
    def __call__(self, tokens, valid):
        config = self.config
        positions = self.param(
            "position_embedding", nn.initializers.normal(0.02), (self.length, config.width)
        )
        x = nn.Embed(self.vocab_size, config.width, name="token_embedding")(tokens) + positions
        causal = jnp.tril(jnp.ones((self.length, self.length), bool))
        mask = (causal & valid[:, None, :])[:, None]  # [N, 1 (heads), L, L]
        for index in range(config.depth):
            x = Block(config.width, config.heads, name=f"block_{index}")(x, mask)
        return nn.LayerNorm(name="final_norm")(x)


def _flat(tokens, valid):
    """Leading batch dims [*B, L] -> [N, L] and back."""
    batch = tokens.shape[:-1]
    return batch, tokens.reshape((-1, tokens.shape[-1])), valid.reshape((-1, valid.shape[-1]))


class TokenPolicyValue(nn.Module):
    """The body with a policy head (logits of each action control of the window's last step)
    and a value head (read at that step's boundary).

    tokens int32 [*B, K * S], step_valid bool [*B, K] -> {"policy": logits [*B, A, n] (one row
    per control), "value": [*B]}."""

    vocab_size: int
    layout: TokenLayout
    n_actions: int
    config: TokenConfig

    @nn.compact
    def __call__(self, tokens, step_valid):
        layout = self.layout
        valid = jnp.repeat(step_valid, layout.step_tokens, axis=-1)
        batch, tokens, valid = _flat(tokens, valid)
        features = TokenBody(self.vocab_size, layout.n_tokens, self.config, name="body")(
            tokens, valid
        )
        read_actions = layout.action_positions[-1] - 1  # [A]
        read_value = layout.value_positions[-1] - 1
        logits = nn.Dense(
            self.n_actions, kernel_init=nn.initializers.orthogonal(0.01), name="policy_logits"
        )(features[:, read_actions])
        value = nn.Dense(1, name="value_head")(features[:, read_value])[..., 0]
        return {
            "policy": logits.reshape(batch + logits.shape[1:]),
            "value": value.reshape(batch),
        }


# ----------------------------------------------------------------------------- the history


class TokenHistory(NamedTuple):
    """The last K steps an actor has seen, right-aligned (the newest at index K - 1)."""

    observations: jax.Array  # int32 [*B, K, O]
    actions: jax.Array  # int32 [*B, K, A]; the newest step's are 0 until chosen
    valid: jax.Array  # bool [*B, K]: False for padding before the episode's first step


def initial_history(layout: TokenLayout, batch_shape) -> TokenHistory:
    batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
    k = layout.n_steps
    return TokenHistory(
        jnp.zeros(batch_shape + (k, layout.observation_tokens), jnp.int32),
        jnp.zeros(batch_shape + (k, layout.action_tokens), jnp.int32),
        jnp.zeros(batch_shape + (k,), bool),
    )


def push(history: TokenHistory, observation_tokens, first) -> TokenHistory:
    """A new step's observation tokens [*B, O] appended (the oldest step dropped); where
    ``first`` [*B], the earlier steps are forgotten (a new episode)."""

    def shift(x, new):
        return jnp.concatenate([x[..., 1:, :], new[..., None, :]], axis=-2)

    observations = shift(history.observations, observation_tokens)
    actions = shift(history.actions, jnp.zeros_like(history.actions[..., 0, :]))
    valid = jnp.concatenate(
        [history.valid[..., 1:] & ~first[..., None], jnp.ones_like(first)[..., None]], axis=-1
    )
    return TokenHistory(observations, actions, valid)


def with_actions(history: TokenHistory, action_tokens) -> TokenHistory:
    """The newest step's action tokens [*B, A] set."""
    return history._replace(actions=history.actions.at[..., -1, :].set(action_tokens))


def window(layout: TokenLayout, history: TokenHistory):
    """(tokens int32 [*B, K * S] in ``layout``, step validity bool [*B, K])."""
    tokens = serialization.interleave(layout, history.observations, history.actions)
    return tokens, history.valid


def parameter_count(params) -> int:
    return int(sum(np.size(x) for x in jax.tree.leaves(params)))


__all__ = [
    "Block",
    "TokenBody",
    "TokenConfig",
    "TokenHistory",
    "TokenPolicyValue",
    "check_token_config",
    "initial_history",
    "push",
    "serializations",
    "window",
    "with_actions",
]
