import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import ops


def gae_reference(rewards, discounts, values, lambdas):
    """A plain backwards loop: A_t = delta_t + discount_t * lambda_t * A_{t+1}."""
    advantages = np.zeros(len(rewards))
    next_advantage = 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + discounts[t] * values[t + 1] - values[t]
        next_advantage = delta + discounts[t] * lambdas[t] * next_advantage
        advantages[t] = next_advantage
    return advantages


@settings(max_examples=30, deadline=None)
@given(
    length=st.integers(1, 20),
    lambda_=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_gae_matches_plain_loop(length, lambda_, seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=length).astype(np.float32)
    discounts = (0.99 * (rng.random(length) > 0.2)).astype(np.float32)
    values = rng.normal(size=length + 1).astype(np.float32)
    expected = gae_reference(rewards, discounts, values, np.full(length, lambda_))
    actual = ops.gae(jnp.asarray(rewards), jnp.asarray(discounts), jnp.asarray(values), lambda_)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


def test_gae_per_step_lambda_cuts_the_trace():
    rewards = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    discounts = np.full(4, 0.9, np.float32)
    values = np.array([0.5, -1.0, 2.0, 0.0, 1.5], np.float32)
    lambdas = np.array([0.95, 0.0, 0.95, 0.95], np.float32)
    expected = gae_reference(rewards, discounts, values, lambdas)
    actual = ops.gae(rewards, discounts, values, jnp.asarray(lambdas))
    np.testing.assert_allclose(actual, expected, rtol=1e-5)
    # With the trace cut after t=1, A_1 is the one-step TD error.
    np.testing.assert_allclose(actual[1], rewards[1] + 0.9 * values[2] - values[1], rtol=1e-6)


def test_gae_special_cases():
    """lambda=0 is the one-step TD error; lambda=1 is the discounted return minus v_t."""
    rewards = np.array([1.0, 0.0, 2.0], np.float32)
    discounts = np.array([0.5, 0.5, 0.0], np.float32)
    values = np.array([1.0, 2.0, 3.0, 9.0], np.float32)
    td = rewards + discounts * values[1:] - values[:-1]
    np.testing.assert_allclose(ops.gae(rewards, discounts, values, 0.0), td, rtol=1e-6)
    returns = np.array([1.0 + 0.5 * (0.0 + 0.5 * 2.0), 0.0 + 0.5 * 2.0, 2.0])
    np.testing.assert_allclose(
        ops.gae(rewards, discounts, values, 1.0), returns - values[:-1], rtol=1e-6
    )


def test_gae_agrees_with_rlax_and_vmaps():
    key = jax.random.PRNGKey(3)
    rewards, discounts, values = (
        jax.random.normal(k, shape)
        for k, shape in zip(jax.random.split(key, 3), [(5, 7), (5, 7), (5, 8)], strict=False)
    )
    discounts = jnp.abs(discounts)
    ours = jax.vmap(ops.gae, in_axes=(0, 0, 0, None))(rewards, discounts, values, 0.9)
    theirs = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))(
        rewards, discounts, 0.9, values
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_gae_stops_gradients_unless_asked_not_to():
    """heron stops them by default (rlax's default is not to)."""
    rewards, discounts, values = jnp.ones(4), jnp.full(4, 0.9), jnp.arange(5.0)

    def total(values, stop):
        return jnp.sum(ops.gae(rewards, discounts, values, 0.8, stop_target_gradients=stop))

    np.testing.assert_array_equal(jax.grad(total)(values, True), jnp.zeros(5))
    # d sum(A) / d v_0 = -1: v_0 only enters delta_0.
    assert float(jax.grad(total)(values, False)[0]) == pytest.approx(-1.0)


def test_gae_checks_shapes():
    with pytest.raises(AssertionError):
        ops.gae(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), 0.9)
