import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import ops

# Jitted once per shape: hypothesis draws from a few shapes, so each compiles once.
project = jax.jit(ops.categorical_l2_project)
td_loss = jax.jit(ops.categorical_td_loss)
td_target = jax.jit(ops.categorical_td_target)


def project_reference(z_p, probs, z_q):
    """A plain double loop over the triangular kernel of an evenly spaced support."""
    dz = (z_q[-1] - z_q[0]) / (len(z_q) - 1)
    projected = np.zeros(len(z_q))
    for i in range(len(z_p)):
        z = min(max(z_p[i], z_q[0]), z_q[-1])
        for j in range(len(z_q)):
            projected[j] += probs[i] * max(0.0, 1.0 - abs(z - z_q[j]) / dz)
    return projected


def td_loss_reference(z, logits_tm1, r_t, discount_t, probs_t):
    target = project_reference(r_t + discount_t * z, probs_t, z)
    log_probs = logits_tm1 - np.log(np.sum(np.exp(logits_tm1)))
    return -np.sum(target * log_probs)


def random_case(rng, num_source, num_target):
    """Source atoms that spill past both ends of an evenly spaced target support."""
    v_min = rng.uniform(-10.0, 0.0)
    v_max = v_min + rng.uniform(0.5, 20.0)
    z_q = np.linspace(v_min, v_max, num_target).astype(np.float32)
    z_p = rng.uniform(v_min - 3.0, v_max + 3.0, num_source).astype(np.float32)
    probs = rng.dirichlet(np.ones(num_source)).astype(np.float32)
    return z_p, probs, z_q


@settings(max_examples=30, deadline=None)
@given(
    num_source=st.sampled_from([1, 4, 13]),
    num_target=st.sampled_from([2, 3, 11]),
    seed=st.integers(0, 2**16),
)
def test_projection_matches_plain_loop_and_keeps_mass(num_source, num_target, seed):
    rng = np.random.default_rng(seed)
    z_p, probs, z_q = random_case(rng, num_source, num_target)
    mass = rng.uniform(0.1, 3.0)  # unnormalised input: the projection keeps the total mass
    projected = project(z_p, mass * probs, z_q)
    expected = project_reference(z_p.astype(np.float64), mass * probs, z_q.astype(np.float64))
    np.testing.assert_allclose(projected, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jnp.sum(projected), mass, rtol=1e-5)
    assert jnp.all(projected >= 0.0)


def test_projection_keeps_the_mean_inside_the_support():
    rng = np.random.default_rng(0)
    z_q = np.linspace(-5.0, 5.0, 21).astype(np.float32)
    z_p = rng.uniform(-5.0, 5.0, 40).astype(np.float32)
    probs = rng.dirichlet(np.ones(40)).astype(np.float32)
    projected = ops.categorical_l2_project(z_p, probs, z_q)
    np.testing.assert_allclose(jnp.sum(projected * z_q), np.sum(probs * z_p), atol=1e-5)


def test_projection_is_exact_on_target_atoms_in_any_order():
    z_q = jnp.linspace(-10.0, 10.0, 51)
    probs = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(0), (51,)))
    np.testing.assert_array_equal(ops.categorical_l2_project(z_q, probs, z_q), probs)
    order = jax.random.permutation(jax.random.PRNGKey(1), 51)
    np.testing.assert_allclose(
        ops.categorical_l2_project(z_q[order], probs[order], z_q), probs, rtol=1e-6, atol=1e-7
    )
    # A few atoms on target atoms (with duplicates) land on them whole.
    z_p = z_q[jnp.array([3, 3, 50, 0])]
    projected = ops.categorical_l2_project(z_p, jnp.array([0.1, 0.2, 0.3, 0.4]), z_q)
    expected = np.zeros(51, np.float32)
    expected[[3, 50, 0]] = [0.3, 0.3, 0.4]
    np.testing.assert_allclose(projected, expected, rtol=1e-6, atol=0)


def test_projection_clips_to_the_edge_atoms():
    z_q = jnp.array([-1.0, 0.0, 1.0])
    z_p = jnp.array([-100.0, -1.5, 1.0001, 7.0, -jnp.inf, jnp.inf])
    probs = jnp.array([0.1, 0.2, 0.3, 0.15, 0.05, 0.2])
    np.testing.assert_allclose(
        ops.categorical_l2_project(z_p, probs, z_q), [0.35, 0.0, 0.65], rtol=1e-6
    )
    # Between two atoms the mass splits linearly.
    np.testing.assert_allclose(
        ops.categorical_l2_project(jnp.array([0.25]), jnp.array([1.0]), z_q),
        [0.0, 0.75, 0.25],
        rtol=1e-6,
    )
    # A single target atom takes everything.
    np.testing.assert_allclose(ops.categorical_l2_project(z_p, probs, jnp.array([2.0])), [1.0])


@pytest.mark.parametrize("evenly_spaced", [True, False])
def test_projection_agrees_with_rlax_and_vmaps(evenly_spaced):
    key_p, key_probs, key_q = jax.random.split(jax.random.PRNGKey(4), 3)
    z_p = 4.0 * jax.random.normal(key_p, (6, 9))
    probs = jax.nn.softmax(jax.random.normal(key_probs, (6, 9)))
    if evenly_spaced:
        z_q = jnp.linspace(-5.0, 5.0, 11)
    else:
        z_q = jnp.cumsum(jax.random.uniform(key_q, (11,), minval=0.1, maxval=2.0)) - 6.0
    ours = jax.vmap(ops.categorical_l2_project, in_axes=(0, 0, None))(z_p, probs, z_q)
    theirs = jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))(z_p, probs, z_q)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(
    num_atoms=st.sampled_from([2, 5, 11]),
    r_t=st.floats(-5.0, 5.0),
    discount_t=st.sampled_from([0.0, 0.5, 0.99, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_td_loss_matches_plain_loop(num_atoms, r_t, discount_t, seed):
    rng = np.random.default_rng(seed)
    z = np.linspace(-3.0, 3.0, num_atoms)
    logits_tm1 = rng.normal(size=num_atoms)
    probs_t = rng.dirichlet(np.ones(num_atoms))
    expected = td_loss_reference(z, logits_tm1, r_t, discount_t, probs_t)
    loss = td_loss(
        jnp.asarray(z, jnp.float32),
        jnp.asarray(logits_tm1, jnp.float32),
        jnp.float32(r_t),
        jnp.float32(discount_t),
        jnp.asarray(probs_t, jnp.float32),
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-4, atol=1e-5)
    target = td_target(
        jnp.asarray(z, jnp.float32),
        jnp.float32(r_t),
        jnp.float32(discount_t),
        jnp.asarray(probs_t, jnp.float32),
    )
    np.testing.assert_allclose(
        target, project_reference(r_t + discount_t * z, probs_t, z), rtol=1e-4, atol=1e-5
    )


def test_td_target_of_a_terminal_transition_is_the_projected_reward():
    z = jnp.linspace(-2.0, 2.0, 5)
    probs_t = jnp.full(5, 0.2)
    target = ops.categorical_td_target(z, jnp.float32(0.5), jnp.float32(0.0), probs_t)
    np.testing.assert_allclose(target, [0.0, 0.0, 0.5, 0.5, 0.0], rtol=1e-6)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_td_loss_agrees_with_rlax_and_vmaps():
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    batch, num_atoms = 8, 51
    z = jnp.linspace(-10.0, 10.0, num_atoms)
    logits_tm1 = jax.random.normal(keys[0], (batch, num_atoms))
    logits_t = jax.random.normal(keys[1], (batch, num_atoms))
    r_t = 3.0 * jax.random.normal(keys[2], (batch,))
    discount_t = jnp.where(jax.random.uniform(keys[3], (batch,)) > 0.3, 0.99, 0.0)
    ours = jax.vmap(ops.categorical_td_loss, in_axes=(None, 0, 0, 0, 0))(
        z, logits_tm1, r_t, discount_t, jax.nn.softmax(logits_t)
    )
    theirs = jax.vmap(rlax.categorical_td_learning, in_axes=(None, 0, 0, 0, None, 0))(
        z, logits_tm1, r_t, discount_t, z, logits_t
    )
    assert ours.shape == (batch,)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_td_loss_gradients_flow_only_into_the_online_logits():
    z = jnp.linspace(-1.0, 1.0, 7)
    logits_tm1 = jax.random.normal(jax.random.PRNGKey(0), (7,))
    probs_t = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(1), (7,)))
    r_t, discount_t = jnp.float32(0.3), jnp.float32(0.9)
    grads = jax.grad(ops.categorical_td_loss, argnums=(1, 2, 3, 4))(
        z, logits_tm1, r_t, discount_t, probs_t
    )
    target = ops.categorical_td_target(z, r_t, discount_t, probs_t)
    # d(cross-entropy)/d(logits) = softmax(logits) - target.
    np.testing.assert_allclose(grads[0], jax.nn.softmax(logits_tm1) - target, atol=1e-6)
    for grad in grads[1:]:
        np.testing.assert_array_equal(grad, jnp.zeros_like(grad))
    grads = jax.grad(ops.categorical_td_loss, argnums=(2, 4))(
        z, logits_tm1, r_t, discount_t, probs_t, False
    )
    assert all(jnp.any(grad != 0.0) for grad in grads)


def test_average_log_probs_is_the_log_of_the_mixture():
    logits = jax.random.normal(jax.random.PRNGKey(2), (5, 11)) * 3.0
    log_probs = ops.average_log_probs(logits)
    expected = np.log(np.mean(jax.nn.softmax(np.asarray(logits, np.float64), axis=-1), axis=0))
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jnp.sum(jnp.exp(log_probs)), 1.0, rtol=1e-6)
    # One sample is just that sample's distribution; shifting a row's logits changes nothing.
    np.testing.assert_allclose(
        ops.average_log_probs(logits[:1]), jax.nn.log_softmax(logits[0]), atol=1e-6
    )
    np.testing.assert_allclose(
        ops.average_log_probs(logits.at[2].add(100.0)), log_probs, rtol=1e-5, atol=1e-5
    )


def test_categorical_mean():
    z = jnp.array([-1.0, 0.0, 2.0])
    logits = jnp.log(jnp.array([0.5, 0.25, 0.25]))
    np.testing.assert_allclose(ops.categorical_mean(z, logits), 0.0, atol=1e-6)
    np.testing.assert_allclose(ops.categorical_mean(z, jnp.array([0.0, 0.0, 50.0])), 2.0, rtol=1e-6)


def test_distributional_ops_check_shapes():
    z = jnp.linspace(-1.0, 1.0, 4)
    with pytest.raises(AssertionError):
        ops.categorical_l2_project(z, jnp.ones(3) / 3, z)
    with pytest.raises(AssertionError):
        ops.categorical_l2_project(z[None], jnp.ones((1, 4)) / 4, z)
    with pytest.raises(AssertionError):
        ops.categorical_td_loss(z, jnp.zeros(5), 0.0, 0.9, jnp.ones(4) / 4)
    with pytest.raises(AssertionError):
        ops.categorical_td_loss(z, jnp.zeros(4), jnp.zeros(2), 0.9, jnp.ones(4) / 4)
    with pytest.raises(AssertionError):
        ops.average_log_probs(jnp.zeros(4))
