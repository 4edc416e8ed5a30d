"""Action distributions from head outputs, with temperature and greedy selection.

Discrete heads output logits [..., n] (or [..., k, n] for k controls); continuous heads
output a dict with ``mean`` [..., d] and ``log_std`` [..., d].
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp

from heron.specs import ActionSpec


def action_distribution(spec: ActionSpec, dist_params, temperature=1.0):
    """The distrax distribution of actions; ``temperature`` scales logits or the std."""
    if spec.is_discrete:
        dist = distrax.Categorical(logits=dist_params / temperature)
        return distrax.Independent(dist, 1) if spec.multi_control else dist
    std = jnp.exp(dist_params["log_std"]) * temperature
    return distrax.MultivariateNormalDiag(dist_params["mean"], std)


def greedy_action(spec: ActionSpec, dist_params):
    if spec.is_discrete:
        return jnp.argmax(dist_params, axis=-1).astype(jnp.int32)
    return dist_params["mean"]


def sample_action(spec: ActionSpec, dist_params, key, temperature=1.0):
    """Samples at ``temperature``; temperature 0 means greedy (may be a traced scalar)."""
    temperature = jnp.asarray(temperature, jnp.float32)
    safe_temperature = jnp.where(temperature > 0, temperature, 1.0)
    sampled = action_distribution(spec, dist_params, safe_temperature).sample(seed=key)
    greedy = greedy_action(spec, dist_params)
    return jax.tree.map(
        lambda s, g: jnp.where(temperature > 0, s, g).astype(g.dtype), sampled, greedy
    )
