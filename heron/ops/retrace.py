"""Retrace targets for continuous actions, and masking of episode restarts.

How a learner (e.g. SVG0) uses these on a sequence of heron experience with steps 0..T
(the reward and discount of step t+1 belong to the transition t -> t+1):

    mask = restart_mask(step_type == StepType.FIRST)          # [T]
    log_rhos = mask_restarts(log_pi[:-1] - log_mu[:-1], mask)  # [T]
    out = retrace_from_importance_weights(
        log_rhos, gamma * discount[1:], reward[1:], target_q[:-1], target_v[:-1], target_v[-1]
    )
    critic_loss = masked mean over t of 0.5 * (out.qs - online_q[:-1]) ** 2, weights ``mask``

where ``target_v[t]`` averages the target critic over actions sampled from the target policy
at step t. Any other per-transition loss (the policy's, a prior's) is averaged with ``mask``
too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import rlax


class RetraceOutput(NamedTuple):
    """Retrace targets and the terms they are built from, all [T]."""

    qs: Any  # the targets Q^ret_t for q_values[t]
    cs: Any  # trace coefficients: cs[t] = lambda_t * min(1, rho_{t+1}), cs[T-1] = lambda_{T-1}
    deltas: Any  # one-step errors: rewards[t] + discounts[t] * V_{t+1} - q_values[t]


def retrace_from_importance_weights(
    log_rhos,
    discounts,
    rewards,
    q_values,
    values,
    bootstrap_value,
    lambda_=1.0,
    stop_target_gradients: bool = True,
) -> RetraceOutput:
    """Retrace targets for the actions taken along one sequence (Munos et al., 2016).

    See https://arxiv.org/abs/1606.02647. With ``V_T = bootstrap_value``,
    ``delta_t = rewards[t] + discounts[t] * V_{t+1} - q_values[t]`` and
    ``c_t = lambda_t * min(1, rho_{t+1})`` (``c_{T-1} = lambda_{T-1}``; it multiplies 0),
    the targets are ``qs_t = q_values[t] + A_t`` with ``A_t = delta_t + discounts[t] * c_t *
    A_{t+1}``, ``A_T = 0``; that is ``qs_t = r_t + gamma_t * (V_{t+1} + c_t * (qs_{t+1} -
    q_values[t+1]))``, the recursion of ``rlax.general_off_policy_returns_from_q_and_v``.
    The target at t never depends on ``rho_t`` (the action at t is given), so
    ``log_rhos[0]`` is unused.

    Args:
      log_rhos: log importance weights [T], ``log pi(a_t|s_t) - log mu(a_t|s_t)`` for steps
        0..T-1 (target policy pi, behaviour policy mu).
      discounts: discounts [T] (gamma times 0 at termination) for the transitions t -> t+1,
        t = 0..T-1.
      rewards: rewards [T] for the same transitions.
      q_values: ``Q(s_t, a_t)`` [T] at steps 0..T-1, for the actions taken (target critic).
      values: ``V(s_t)`` [T] at steps 0..T-1 under the target policy (e.g. the target critic
        averaged over actions sampled from it).
      bootstrap_value: ``V(s_T)``, a scalar.
      lambda_: scalar or [T] mixing parameter; a 0 at t cuts the trace after transition t.
      stop_target_gradients: whether no gradient flows into the outputs.

    Returns:
      a ``RetraceOutput`` of [T] arrays: ``qs`` (the targets), ``cs`` and ``deltas``.
    """
    chex.assert_rank(
        [log_rhos, discounts, rewards, q_values, values, bootstrap_value], [1, 1, 1, 1, 1, 0]
    )
    chex.assert_equal_shape([log_rhos, discounts, rewards, q_values, values])
    lambda_ = jnp.broadcast_to(jnp.asarray(lambda_, q_values.dtype), rewards.shape)
    # rlax takes the T-1 coefficients c_0..c_{T-2} that multiply something; heron's ``cs``
    # has T entries (c_{T-1} = lambda_{T-1}, which multiplies the zero past the bootstrap).
    truncated_rho_tp1 = jnp.concatenate(
        [jnp.minimum(1.0, jnp.exp(log_rhos[1:])), jnp.ones((1,), log_rhos.dtype)]
    )
    cs = lambda_ * truncated_rho_tp1
    values_tp1 = jnp.concatenate([values[1:], jnp.asarray(bootstrap_value)[None]])
    qs = rlax.general_off_policy_returns_from_q_and_v(
        q_values[1:], values_tp1, rewards, discounts, cs[:-1]
    )
    output = RetraceOutput(qs=qs, cs=cs, deltas=rewards + discounts * values_tp1 - q_values)
    return jax.lax.stop_gradient(output) if stop_target_gradients else output


def restart_mask(is_first, dtype=jnp.float32):
    """Which transitions of a sequence stay inside one episode.

    The transition t -> t+1 out of a LAST step is the environment's reset: its action was
    never executed and step t+1 is FIRST. As Acme's SVG0 does, a learner gives such a
    transition no loss and cuts traces there (``mask_restarts``).

    Args:
      is_first: bool [T+1], whether steps 0..T are FIRST (``step_type == StepType.FIRST``).
      dtype: the mask's dtype.

    Returns:
      mask [T] for the transitions t -> t+1, t = 0..T-1: 0 where step t+1 is FIRST, else 1.
    """
    chex.assert_rank(is_first, 1)
    return jnp.logical_not(jnp.asarray(is_first, bool)[1:]).astype(dtype)


def mask_restarts(log_rhos, mask):
    """Sets the importance weight of each masked transition to 0, cutting traces there.

    With ``rho_t = 0`` on a transition t out of a LAST step, ``c_{t-1} = 0`` in
    ``retrace_from_importance_weights``, so the target at t-1 stops at the bootstrap
    ``r_{t-1} + gamma_{t-1} * V_t`` (``V_t`` of the LAST step's observation, which a
    truncated episode bootstraps from) and nothing flows back across the restart. The target
    at t itself is meaningless: mask its loss with the same ``mask``. Acme adds 1e-8 before
    the log; here the weight is exactly 0 (the log is the dtype's most negative finite
    number, so ``log_rhos * mask`` stays finite).

    Args:
      log_rhos: log importance weights [T] for steps 0..T-1.
      mask: [T] from ``restart_mask``; 0 marks a transition to cut.

    Returns:
      log importance weights [T].
    """
    chex.assert_rank([log_rhos, mask], [1, 1])
    chex.assert_equal_shape([log_rhos, mask])
    return jnp.where(mask > 0, log_rhos, jnp.finfo(log_rhos.dtype).min)
