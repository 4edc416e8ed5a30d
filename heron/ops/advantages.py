"""Advantage estimation."""

from __future__ import annotations

import chex
import jax.numpy as jnp
import rlax


def gae(r_t, discount_t, values, lambda_, stop_target_gradients: bool = True):
    """Generalised advantage estimation over one sequence (Schulman et al., 2015).

    See https://arxiv.org/abs/1506.02438. With ``delta_t = r_t + discount_t * v_{t+1} - v_t``
    the advantages are ``A_t = delta_t + discount_t * lambda_t * A_{t+1}``, ``A_T = 0``
    (``rlax.truncated_generalized_advantage_estimation``).

    Args:
      r_t: rewards [T] for the transitions t -> t+1.
      discount_t: discounts [T] (gamma times 0 at termination), same transitions.
      values: state values [T+1] at steps 0..T; ``values[T]`` bootstraps the last transition.
      lambda_: scalar or [T] mixing parameter; a 0 at t cuts the trace after transition t.
      stop_target_gradients: whether no gradient flows into the advantages.

    Returns:
      advantages [T].
    """
    # rlax checks ranks only: a values or lambda_ of the wrong length would broadcast or
    # fail deep inside it, so the lengths are checked here.
    chex.assert_rank([r_t, discount_t, values], [1, 1, 1])
    chex.assert_equal_shape([r_t, discount_t])
    chex.assert_equal(values.shape[0], r_t.shape[0] + 1)
    lambda_ = jnp.broadcast_to(jnp.asarray(lambda_, values.dtype), r_t.shape)
    return rlax.truncated_generalized_advantage_estimation(
        r_t, discount_t, lambda_, values, stop_target_gradients
    )
