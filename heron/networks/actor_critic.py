"""Separate policy and critic networks for off-policy actor-critic agents (CRR, SVG0).

Continuous actions live in [-1, 1]^d inside the networks (a tanh-squashed Gaussian); the
agent maps them to the environment's Box. Discrete actions are categorical; the critic
reads them one-hot.
"""

from __future__ import annotations

from collections.abc import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from heron.specs import ActionSpec

_LOG_STD_RANGE = (-5.0, 2.0)
_EDGE = 1e-6  # keeps squashed actions off +-1, where tanh is not invertible


class LayerNormMLP(nn.Module):
    """Dense -> LayerNorm -> tanh, then dense layers with ELU (Acme's LayerNormMLP)."""

    hidden_sizes: Sequence[int]

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(nn.LayerNorm()(nn.Dense(self.hidden_sizes[0])(x)))
        for size in self.hidden_sizes[1:]:
            x = nn.elu(nn.Dense(size)(x))
        return x


class Policy(nn.Module):
    """Observations [..., obs] -> logits [..., n] (discrete) or {mean, log_std} [..., d]."""

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, observation):
        features = LayerNormMLP(self.hidden_sizes)(observation)
        if self.spec.is_discrete:
            return nn.Dense(self.spec.n_actions, kernel_init=nn.initializers.zeros)(features)
        size = len(self.spec.low)
        mean = nn.Dense(
            size, kernel_init=nn.initializers.variance_scaling(1e-4, "fan_in", "uniform")
        )(features)
        log_std = nn.Dense(size, kernel_init=nn.initializers.zeros)(features)
        return {"mean": mean, "log_std": jnp.clip(log_std, *_LOG_STD_RANGE)}


def state_action(spec: ActionSpec, observation, action):
    """A critic's input: the observation and the action (one-hot when discrete) side by side."""
    if spec.is_discrete:
        action = jax.nn.one_hot(action, spec.n_actions)
    return jnp.concatenate([observation, action.astype(observation.dtype)], -1)


class DistributionalCritic(nn.Module):
    """(observations [..., obs], actions [..., d]) -> logits [..., num_atoms] of Q(s, a)."""

    spec: ActionSpec
    num_atoms: int
    hidden_sizes: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, observation, action):
        features = LayerNormMLP(self.hidden_sizes)(state_action(self.spec, observation, action))
        return nn.Dense(self.num_atoms, kernel_init=nn.initializers.zeros)(features)


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


def flat_observation(observation_shape, observation):
    """Observations [..., *observation_shape] -> float32 [..., prod(observation_shape)]."""
    batch = observation.shape[: observation.ndim - len(observation_shape)]
    return observation.reshape(batch + (-1,)).astype(jnp.float32)


def policy_distribution(spec: ActionSpec, dist_params, temperature=1.0):
    """Categorical over logits / T, or a tanh-squashed Gaussian with std x T."""
    if spec.is_discrete:
        return distrax.Categorical(logits=dist_params / temperature)
    normal = distrax.MultivariateNormalDiag(
        dist_params["mean"], jnp.exp(dist_params["log_std"]) * temperature
    )
    return distrax.Transformed(normal, distrax.Block(distrax.Tanh(), ndims=1))


def log_prob(spec: ActionSpec, dist_params, action):
    """log pi(a|s); squashed actions are kept off the edges of [-1, 1]."""
    if not spec.is_discrete:
        action = jnp.clip(action, -1.0 + _EDGE, 1.0 - _EDGE)
    return policy_distribution(spec, dist_params).log_prob(action)


def sample(spec: ActionSpec, dist_params, key, temperature=1.0):
    """A sample at ``temperature`` (0: greedy, may be traced): argmax or tanh(mean)."""
    temperature = jnp.asarray(temperature, jnp.float32)
    safe = jnp.where(temperature > 0, temperature, 1.0)
    sampled = policy_distribution(spec, dist_params, safe).sample(seed=key)
    greedy = jnp.argmax(dist_params, -1) if spec.is_discrete else jnp.tanh(dist_params["mean"])
    return jnp.where(temperature > 0, sampled, greedy).astype(greedy.dtype)


class Critic(nn.Module):
    """(observations [..., obs], actions [..., d]) -> Q(s, a) [...] (a scalar critic)."""

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, observation, action):
        features = LayerNormMLP(self.hidden_sizes)(state_action(self.spec, observation, action))
        return nn.Dense(1)(features)[..., 0]
