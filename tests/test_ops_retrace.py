import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import ops

retrace = jax.jit(ops.retrace_from_importance_weights)  # compiled once per length


def retrace_reference(log_rhos, discounts, rewards, q_values, values, bootstrap, lambdas):
    """A plain backwards loop: Q_t + A_t, A_t = delta_t + gamma_t * c_t * A_{t+1}."""
    length = len(rewards)
    qs = np.zeros(length)
    next_correction = 0.0
    for t in reversed(range(length)):
        next_value = bootstrap if t == length - 1 else values[t + 1]
        c = lambdas[t] * (min(1.0, np.exp(log_rhos[t + 1])) if t < length - 1 else 1.0)
        delta = rewards[t] + discounts[t] * next_value - q_values[t]
        next_correction = delta + discounts[t] * c * next_correction
        qs[t] = q_values[t] + next_correction
    return qs


def random_sequence(rng, length):
    return dict(
        log_rhos=rng.normal(scale=1.0, size=length).astype(np.float32),
        discounts=(0.99 * (rng.random(length) > 0.2)).astype(np.float32),
        rewards=rng.normal(size=length).astype(np.float32),
        q_values=rng.normal(size=length).astype(np.float32),
        values=rng.normal(size=length).astype(np.float32),
        bootstrap_value=np.float32(rng.normal()),
    )


@settings(max_examples=30, deadline=None)
@given(
    length=st.sampled_from([1, 2, 7, 20]),
    lambda_=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_retrace_matches_plain_loop(length, lambda_, seed):
    seq = random_sequence(np.random.default_rng(seed), length)
    expected = retrace_reference(*seq.values(), np.full(length, lambda_))
    out = retrace(**seq, lambda_=np.float32(lambda_))
    np.testing.assert_allclose(out.qs, expected, rtol=1e-4, atol=1e-4)
    assert out.qs.shape == out.cs.shape == out.deltas.shape == (length,)
    np.testing.assert_allclose(out.cs[-1], lambda_, rtol=1e-6, atol=1e-7)


def test_retrace_per_step_lambda_cuts_the_trace():
    seq = random_sequence(np.random.default_rng(1), 6)
    lambdas = np.array([0.9, 0.9, 0.0, 0.9, 0.9, 0.9], np.float32)
    expected = retrace_reference(*seq.values(), lambdas)
    out = ops.retrace_from_importance_weights(**seq, lambda_=jnp.asarray(lambdas))
    np.testing.assert_allclose(out.qs, expected, rtol=1e-5, atol=1e-6)
    # The trace is cut after transition 2, whose target is the one-step target.
    r, d, v = seq["rewards"], seq["discounts"], seq["values"]
    np.testing.assert_allclose(out.qs[2], r[2] + d[2] * v[3], rtol=1e-6)


def test_retrace_with_lambda_zero_is_the_one_step_target():
    seq = random_sequence(np.random.default_rng(2), 7)
    out = ops.retrace_from_importance_weights(**seq, lambda_=0.0)
    next_values = np.append(seq["values"][1:], seq["bootstrap_value"])
    np.testing.assert_allclose(
        out.qs, seq["rewards"] + seq["discounts"] * next_values, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(out.deltas, out.qs - seq["q_values"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out.cs, np.zeros(7))


def test_on_policy_retrace_with_lambda_one_is_the_n_step_return():
    """rho = 1 and lambda = 1: the V_{t+1} - Q_{t+1} terms telescope away where V = Q,
    leaving the discounted rewards plus the discounted bootstrap; otherwise each step adds
    its discounted V_{k+1} - Q_{k+1}."""
    rng = np.random.default_rng(3)
    seq = random_sequence(rng, 5)
    seq["log_rhos"] = np.zeros(5, np.float32)
    seq["discounts"] = np.array([0.9, 0.8, 0.0, 0.7, 0.6], np.float32)
    rewards, discounts, bootstrap = seq["rewards"], seq["discounts"], seq["bootstrap_value"]

    def n_step_returns(corrections):
        returns, acc = np.zeros(5), bootstrap
        for t in reversed(range(5)):
            acc = rewards[t] + discounts[t] * (acc + corrections[t])
            returns[t] = acc
        return returns

    seq["values"] = seq["q_values"].copy()
    out = ops.retrace_from_importance_weights(**seq, lambda_=1.0)
    np.testing.assert_allclose(out.qs, n_step_returns(np.zeros(5)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        out.qs[3], rewards[3] + 0.7 * (rewards[4] + 0.6 * bootstrap), rtol=1e-6
    )
    seq["values"] = rng.normal(size=5).astype(np.float32)
    corrections = np.append(seq["values"][1:] - seq["q_values"][1:], 0.0)
    out = ops.retrace_from_importance_weights(**seq, lambda_=1.0)
    np.testing.assert_allclose(out.qs, n_step_returns(corrections), rtol=1e-5, atol=1e-6)


def test_retrace_ignores_the_first_weight_and_truncates_rhos_above_one():
    seq = random_sequence(np.random.default_rng(4), 6)
    out = ops.retrace_from_importance_weights(**seq, lambda_=0.8)
    changed = dict(seq, log_rhos=seq["log_rhos"].copy())
    changed["log_rhos"][0] = 30.0
    np.testing.assert_allclose(
        ops.retrace_from_importance_weights(**changed, lambda_=0.8).qs, out.qs, rtol=1e-6
    )
    above = dict(seq, log_rhos=np.abs(seq["log_rhos"]) + 0.5)
    ones = dict(seq, log_rhos=np.zeros(6, np.float32))
    np.testing.assert_allclose(
        ops.retrace_from_importance_weights(**above, lambda_=0.8).qs,
        ops.retrace_from_importance_weights(**ones, lambda_=0.8).qs,
        rtol=1e-6,
    )


def test_retrace_agrees_with_rlax_and_vmaps():
    keys = jax.random.split(jax.random.PRNGKey(5), 6)
    batch, length = 4, 9
    log_rhos, rewards, q_values, values = (jax.random.normal(k, (batch, length)) for k in keys[:4])
    discounts = jnp.where(jax.random.uniform(keys[4], (batch, length)) > 0.2, 0.95, 0.0)
    bootstrap = jax.random.normal(keys[5], (batch,))
    ours = jax.vmap(ops.retrace_from_importance_weights, in_axes=(0, 0, 0, 0, 0, 0, None))(
        log_rhos, discounts, rewards, q_values, values, bootstrap, 0.9
    )
    assert ours.qs.shape == (batch, length)
    values_tp1 = jnp.concatenate([values[:, 1:], bootstrap[:, None]], axis=1)
    errors = jax.vmap(rlax.retrace_continuous, in_axes=(0, 0, 0, 0, 0, 0, None))(
        q_values, q_values[:, 1:], values_tp1, rewards, discounts, log_rhos[:, 1:], 0.9
    )
    np.testing.assert_allclose(ours.qs, errors + q_values, rtol=1e-5, atol=1e-5)


def test_retrace_stops_target_gradients():
    seq = {k: jnp.asarray(v) for k, v in random_sequence(np.random.default_rng(6), 5).items()}

    def total(seq, stop):
        out = ops.retrace_from_importance_weights(**seq, stop_target_gradients=stop)
        return jnp.sum(out.qs) + jnp.sum(out.deltas) + jnp.sum(out.cs)

    stopped = jax.grad(total)(seq, True)
    for name, grad in stopped.items():
        np.testing.assert_array_equal(grad, jnp.zeros_like(grad), err_msg=name)
    flowing = jax.grad(total)(seq, False)
    for name in ["rewards", "q_values", "values", "bootstrap_value", "discounts"]:
        assert jnp.any(flowing[name] != 0.0), name


def test_restart_masking_splits_a_sequence_into_its_episodes():
    """Steps 0..8 where step 5 is FIRST: transition 4 (out of the LAST step 4) is a reset."""
    seq = random_sequence(np.random.default_rng(7), 8)
    seq["discounts"][3] = 0.99  # the first episode was truncated: transition 3 bootstraps V_4
    is_first = np.zeros(9, bool)
    is_first[[0, 5]] = True
    mask = ops.restart_mask(jnp.asarray(is_first))
    np.testing.assert_array_equal(mask, [1, 1, 1, 1, 0, 1, 1, 1])
    assert mask.dtype == jnp.float32
    log_rhos = ops.mask_restarts(jnp.asarray(seq["log_rhos"]), mask)
    assert jnp.exp(log_rhos[4]) == 0.0 and jnp.all(jnp.isfinite(log_rhos * mask))
    np.testing.assert_array_equal(np.delete(log_rhos, 4), np.delete(seq["log_rhos"], 4))
    out = ops.retrace_from_importance_weights(**dict(seq, log_rhos=log_rhos), lambda_=0.9)
    assert out.cs[3] == 0.0

    def episode(start, stop, bootstrap):
        part = {k: v[start:stop] for k, v in seq.items() if k != "bootstrap_value"}
        return ops.retrace_from_importance_weights(
            **part, bootstrap_value=bootstrap, lambda_=0.9
        ).qs

    # The first episode bootstraps from V of its LAST observation (step 4) ...
    np.testing.assert_allclose(out.qs[:4], episode(0, 4, seq["values"][4]), rtol=1e-5)
    # ... and the second one is unaffected by what came before it.
    np.testing.assert_allclose(out.qs[5:], episode(5, 8, seq["bootstrap_value"]), rtol=1e-5)
    # Whatever the reset transition holds reaches no unmasked target.
    garbage = dict(seq, log_rhos=log_rhos)
    for name in ["rewards", "q_values", "discounts"]:
        garbage[name] = seq[name].copy()
        garbage[name][4] = 1e3
    garbage_out = ops.retrace_from_importance_weights(**garbage, lambda_=0.9)
    np.testing.assert_allclose(garbage_out.qs * mask, out.qs * mask, rtol=1e-5)


def test_restart_mask_vmaps_over_step_types():
    is_first = jnp.array([[True, False, False], [False, True, False], [False, False, True]])
    np.testing.assert_array_equal(jax.vmap(ops.restart_mask)(is_first), [[1, 1], [0, 1], [1, 0]])


def test_retrace_checks_shapes():
    with pytest.raises(AssertionError):
        ops.retrace_from_importance_weights(
            jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(4), 0.0
        )
    with pytest.raises(AssertionError):
        ops.retrace_from_importance_weights(
            jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(1)
        )
    with pytest.raises(AssertionError):
        ops.mask_restarts(jnp.zeros(3), jnp.ones(4))


def test_a_near_zero_weight_cuts_the_trace_like_mask_restarts():
    """SVG0 (as Acme) zeroes rho at a restart and takes log(rho + 1e-20): the same targets as
    ``mask_restarts``, up to terms of order 1e-20."""
    seq = random_sequence(np.random.default_rng(8), 6)
    mask = jnp.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    exact = ops.mask_restarts(jnp.asarray(seq["log_rhos"]), mask)
    tiny = jnp.log(jnp.where(mask > 0, jnp.exp(seq["log_rhos"]), 0.0) + 1e-20)
    for lambda_ in (0.0, 0.5, 1.0):
        np.testing.assert_allclose(
            ops.retrace_from_importance_weights(**dict(seq, log_rhos=tiny), lambda_=lambda_).qs,
            ops.retrace_from_importance_weights(**dict(seq, log_rhos=exact), lambda_=lambda_).qs,
            rtol=1e-6,
            atol=1e-6,
        )
    one_step = seq["rewards"][1] + seq["discounts"][1] * seq["values"][2]
    out = ops.retrace_from_importance_weights(**dict(seq, log_rhos=tiny), lambda_=1.0)
    assert float(out.qs[1]) == pytest.approx(float(one_step), rel=1e-6)
