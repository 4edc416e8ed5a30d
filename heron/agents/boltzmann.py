"""Boltzmann action resampling (Acme): sample N candidate actions from the actor, score them
with the critic, and pick one per batch element with probabilities softmax(Q / beta).

The recurrent variant also returns, for each batch element, the recurrent states that
produced the chosen candidate, so the next step continues from them.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def boltzmann_probabilities(q_values, beta):
    """softmax(Q / beta) over the N candidates of each batch element: [N, B] -> [N, B]."""
    chex.assert_rank(q_values, 2)
    return jax.nn.softmax(q_values / beta, axis=0)


def resample(key, actions, q_values, beta):
    """Chooses one of N candidate actions [N, B, ...] per batch element by softmax(Q / beta);
    ``beta`` 0 (or below 1e-6) takes the candidate of highest Q.

    Returns (actions [B, ...], chosen indices [B]).
    """
    chex.assert_rank(q_values, 2)
    beta = jnp.asarray(beta, jnp.float32)
    greedy = beta < 1e-6
    sampled = jax.random.categorical(key, q_values / jnp.where(greedy, 1.0, beta), axis=0)
    index = jnp.where(greedy, jnp.argmax(q_values, axis=0), sampled)  # [B]
    batch = jnp.arange(q_values.shape[1])
    return jax.tree.map(lambda x: x[index, batch], actions), index


def resample_with_states(key, actions, q_values, beta, states):
    """``resample`` for recurrent actors and critics: ``states`` (any pytree of [N, B, ...],
    e.g. the policy's and the critic's core states after each candidate) are selected with
    the same indices. Returns (actions [B, ...], states [B, ...], indices [B])."""
    chosen, index = resample(key, actions, q_values, beta)
    batch = jnp.arange(q_values.shape[1])
    return chosen, jax.tree.map(lambda x: x[index, batch], states), index
