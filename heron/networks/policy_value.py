"""MLP torso and the policy-and-value network (shared torso or two towers, as in Trax)."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from heron.specs import ActionSpec

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu, "gelu": nn.gelu}


def _dense(features: int, scale: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(scale))


class MLP(nn.Module):
    """Dense layers with an activation after each: [..., D] -> [..., hidden_sizes[-1]]."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        for size in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](_dense(size, np.sqrt(2))(x))
        return x


class PolicyHead(nn.Module):
    """Logits [..., n] or [..., k, n] for discrete actions; mean and log_std for Box."""

    spec: ActionSpec

    @nn.compact
    def __call__(self, features):
        spec = self.spec
        if spec.is_discrete:
            logits = _dense(spec.n_controls * spec.n_actions, 0.01)(features)
            shape = (spec.n_controls, spec.n_actions) if spec.multi_control else (spec.n_actions,)
            return logits.reshape(features.shape[:-1] + shape)
        size = int(np.prod(spec.shape))
        mean = _dense(size, 0.01)(features)
        log_std = self.param("log_std", nn.initializers.zeros, (size,))
        return {"mean": mean, "log_std": jnp.broadcast_to(log_std, mean.shape)}


class PolicyValueNet(nn.Module):
    """Observations [..., *obs] -> (policy head output, value [...]).

    ``two_towers=False`` shares one torso between the heads (Trax's default);
    ``two_towers=True`` gives the policy and the value their own torsos.
    """

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    two_towers: bool = True
    observation_ndim: int = 1

    @nn.compact
    def __call__(self, observation):
        batch_shape = observation.shape[: observation.ndim - self.observation_ndim]
        observation = observation.reshape(batch_shape + (-1,)).astype(jnp.float32)
        policy_features = MLP(self.hidden_sizes, self.activation)(observation)
        if self.two_towers:
            value_features = MLP(self.hidden_sizes, self.activation)(observation)
        else:
            value_features = policy_features
        value = _dense(1, 1.0)(value_features)[..., 0]
        return PolicyHead(self.spec)(policy_features), value
