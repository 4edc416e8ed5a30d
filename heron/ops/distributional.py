"""Categorical (distributional) value learning: projection, TD target and loss, helpers.

A categorical value distribution is a fixed, sorted support ``z`` [M] (the atoms) and
logits or probabilities [M] over it (Bellemare et al., 2017). All ops are unbatched;
``vmap`` them over a batch at the call site.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import optax


def categorical_l2_project(z_p, probs, z_q):
    """Projects the categorical distribution ``(z_p, probs)`` onto the support ``z_q``.

    The L2 (Cramér) projection of Rowland et al. (2018), https://arxiv.org/abs/1802.08163,
    that C51 uses (Bellemare et al., 2017, https://arxiv.org/abs/1707.06887). Each source
    atom is first clipped to ``[z_q[0], z_q[-1]]``, so mass outside the target range goes to
    the edge atoms; its mass is then split between the two target atoms around it by linear
    interpolation. On an evenly spaced support with spacing ``dz`` this is the triangular
    kernel ``probs_q[j] = sum_i probs[i] * max(0, 1 - |clip(z_p[i]) - z_q[j]| / dz)``. A source
    atom equal to a target atom gives all its mass to that atom, and the projection keeps the
    total mass and, for atoms inside the range, the mean.

    Args:
      z_p: source atoms [N], in any order; duplicates are allowed.
      probs: source probabilities [N]; need not sum to 1 (the total mass is kept).
      z_q: target atoms [M], strictly increasing. C51 uses an evenly spaced support, but the
        interpolation is exact for any strictly increasing one. Only ranks, shapes and
        dtypes are checked; the ordering is not (it would need a host sync under ``jit``).

    Returns:
      probabilities [M] on ``z_q``, summing to ``sum(probs)``.
    """
    # Not rlax.categorical_l2_project: it multiplies by reciprocal atom spacings, so an atom
    # on a target atom leaks ~1e-7 of its mass to the neighbours (x * (1 / x) != 1 in
    # float32). Dividing keeps a source atom on a target atom exactly there.
    chex.assert_rank([z_p, probs, z_q], [1, 1, 1])
    chex.assert_equal_shape([z_p, probs])
    chex.assert_type([z_p, probs, z_q], [float, float, float])
    z_p, probs, z_q = jnp.asarray(z_p), jnp.asarray(probs), jnp.asarray(z_q)
    num_atoms = z_q.shape[0]
    if num_atoms == 1:
        return jnp.sum(probs, keepdims=True)
    z = jnp.clip(z_p, z_q[0], z_q[-1])
    # The target atoms z_q[lower] <= z <= z_q[lower + 1] around each clipped source atom:
    # counting interior atoms at or below z keeps ``lower`` in [0, M - 2], so an atom on
    # z_q[-1] falls in the last interval with all its mass on the upper end.
    lower = jnp.sum(z_q[None, 1:-1] <= z[:, None], axis=1)
    upper_share = (z - z_q[lower]) / (z_q[lower + 1] - z_q[lower])
    lower_hot = jax.nn.one_hot(lower, num_atoms, dtype=probs.dtype)
    upper_hot = jax.nn.one_hot(lower + 1, num_atoms, dtype=probs.dtype)
    return (probs * (1.0 - upper_share)) @ lower_hot + (probs * upper_share) @ upper_hot


def average_log_probs(logits):
    """Log-probabilities [M] of the mixture of the ``S`` categoricals given by ``logits``.

    CRR's critic target averages the target critic's distributions over ``S`` actions sampled
    from the target policy (Wang et al., 2020, https://arxiv.org/abs/2006.15134); averaging in
    log space keeps it stable: ``logsumexp_s(log_softmax(logits_s)) - log S``.

    Args:
      logits: logits [S, M], one row per sampled action.

    Returns:
      normalised log-probabilities [M] of the equally weighted mixture.
    """
    chex.assert_rank(logits, 2)
    chex.assert_type(logits, float)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return jax.nn.logsumexp(log_probs, axis=0) - math.log(logits.shape[0])


def categorical_mean(z, logits):
    """The expected value ``sum_j softmax(logits)_j * z_j`` of a categorical distribution.

    Args:
      z: atoms [M].
      logits: logits [M] over ``z``.

    Returns:
      the mean, a scalar.
    """
    chex.assert_rank([z, logits], [1, 1])
    chex.assert_equal_shape([z, logits])
    return jnp.sum(jax.nn.softmax(logits) * z)


def categorical_td_target(z, r_t, discount_t, probs_t, stop_target_gradients: bool = True):
    """The projected distributional Bellman target for one transition (Bellemare et al.).

    See https://arxiv.org/abs/1707.06887. The next-state distribution ``(z, probs_t)`` is
    shifted and scaled to the support ``r_t + discount_t * z`` and projected back onto ``z``
    with ``categorical_l2_project`` (https://arxiv.org/abs/1802.08163).

    Args:
      z: atoms [M], strictly increasing, shared by the online and target distributions.
      r_t: reward, a scalar, for the transition tm1 -> t.
      discount_t: discount, a scalar (gamma times 0 at termination), same transition.
      probs_t: target probabilities [M] over ``z`` at step t (for CRR, the mixture over
        target-policy action samples: ``jnp.exp(average_log_probs(logits))``).
      stop_target_gradients: whether no gradient flows into the target.

    Returns:
      target probabilities [M] over ``z``.
    """
    chex.assert_rank([z, r_t, discount_t, probs_t], [1, 0, 0, 1])
    chex.assert_equal_shape([z, probs_t])
    target = categorical_l2_project(r_t + discount_t * z, probs_t, z)
    return jax.lax.stop_gradient(target) if stop_target_gradients else target


def categorical_td_loss(
    z, logits_q_tm1, r_t, discount_t, probs_t, stop_target_gradients: bool = True
):
    """The categorical TD loss for one transition: cross-entropy to the projected target.

    See https://arxiv.org/abs/1707.06887. With ``target = categorical_td_target(z, r_t,
    discount_t, probs_t)`` the loss is ``-sum_j target_j * log_softmax(logits_q_tm1)_j``.

    Args:
      z: atoms [M], strictly increasing, shared by the online and target distributions.
      logits_q_tm1: online logits [M] over ``z`` for ``Q(s_tm1, a_tm1)``.
      r_t: reward, a scalar, for the transition tm1 -> t.
      discount_t: discount, a scalar (gamma times 0 at termination), same transition.
      probs_t: target probabilities [M] over ``z`` at step t.
      stop_target_gradients: whether no gradient flows into the target.

    Returns:
      the cross-entropy, a scalar.
    """
    chex.assert_rank([z, logits_q_tm1, r_t, discount_t, probs_t], [1, 1, 0, 0, 1])
    chex.assert_equal_shape([z, logits_q_tm1, probs_t])
    target = categorical_td_target(z, r_t, discount_t, probs_t, stop_target_gradients)
    return optax.softmax_cross_entropy(logits_q_tm1, target)
