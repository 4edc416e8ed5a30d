"""Actions as networks see them: Box actions squashed to [-1, 1]^d, discrete actions
one-hot per control, and candidates tiled along a leading sample axis."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from heron.configs import ConfigError
from heron.specs import ActionSpec


def require_box(spec: ActionSpec, agent: str, why: str) -> None:
    """A ConfigError for an agent that needs continuous (Box) actions (``why``: what it
    differentiates Q through) given discrete ones."""
    if spec.is_discrete:
        raise ConfigError(
            f"{agent} needs continuous (Box) actions: it differentiates Q through {why}, and "
            "this environment's actions are discrete (Discrete or MultiDiscrete); use ppo, "
            "dqn or crr for discrete action spaces"
        )


def tile(count: int, tree):
    """Every leaf repeated ``count`` times along a new leading axis."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (count,) + x.shape), tree)


def action_size(spec: ActionSpec) -> int:
    """Features of ``encode_action``'s output."""
    if spec.is_discrete:
        return spec.n_controls * spec.n_actions
    return math.prod(spec.shape)


def encode_action(spec: ActionSpec, action):
    """A critic's view of actions [..., *action_shape] -> [..., action_size]: one-hot per
    control for discrete actions, the (squashed) action itself for Box actions."""
    if spec.is_discrete:
        one_hot = jax.nn.one_hot(action, spec.n_actions)
        batch = one_hot.shape[: one_hot.ndim - 1 - int(spec.multi_control)]
        return one_hot.reshape(batch + (-1,))
    batch = action.shape[: action.ndim - len(spec.shape)]
    return action.reshape(batch + (-1,)).astype(jnp.float32)


def to_box(spec: ActionSpec, action):
    """A squashed action in [-1, 1]^d -> the environment's Box (discrete actions pass)."""
    if spec.is_discrete:
        return action
    low, high = (jnp.asarray(b, jnp.float32) for b in spec.bounds)
    return low + (action + 1.0) * 0.5 * (high - low)


def from_box(spec: ActionSpec, action):
    """An action in the environment's Box -> [-1, 1]^d (discrete actions pass)."""
    if spec.is_discrete:
        return action
    low, high = (jnp.asarray(b, jnp.float32) for b in spec.bounds)
    return 2.0 * (action - low) / (high - low) - 1.0
