"""One network interface: feed-forward as the degenerate case, cores reset at FIRST in step
and unroll alike, states before each step, stacked towers, and the distributions module."""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.networks import (
    DenseHead,
    NetworkConfig,
    PolicyHead,
    distributions,
    make_network,
    stack,
)
from heron.specs import action_spec_from_space

INPUT = 5


def _net(core="none", head=None, **overrides):
    config = NetworkConfig(hidden_sizes=(8,), core=core, core_size=6, **overrides)
    return make_network(config, head or DenseHead((3,), 1.0), INPUT)


def _randomised(params, seed=0):
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree.unflatten(
        treedef, [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    )


def _inputs(length=6, batch=4, seed=1):
    xs = jax.random.normal(jax.random.PRNGKey(seed), (length, batch, INPUT))
    firsts = jnp.zeros((length, batch), bool).at[0].set(True).at[3, 1].set(True)
    return xs, firsts


@pytest.mark.user_compile  # equal to 1e-6: XLA's unoptimised kernels round otherwise
@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_unroll_equals_stepping_and_returns_the_states_before_each_step(core):
    net = _net(core)
    params = _randomised(net.init(jax.random.PRNGKey(0)))
    xs, firsts = _inputs()
    start = jax.tree.map(lambda x: x + 0.3, net.initial_state((4,)))
    final, outs, states = net.unroll(params, start, xs, firsts)
    state = start
    for t in range(xs.shape[0]):
        before = state
        state, out = net.step(params, state, xs[t], firsts[t])
        np.testing.assert_allclose(outs[t], out, rtol=1e-5, atol=1e-6)
        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(states), strict=True):
            np.testing.assert_allclose(b[t], a, rtol=1e-6, atol=1e-7)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(final), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_the_core_resets_where_an_episode_starts(core):
    net = _net(core)
    params = _randomised(net.init(jax.random.PRNGKey(0)))
    xs, firsts = _inputs()
    changed = xs.at[:3].add(2.0)  # everything before env 1's FIRST at step 3
    _, outs, _ = net.unroll(params, net.initial_state((4,)), xs, firsts)
    _, outs_changed, _ = net.unroll(params, net.initial_state((4,)), changed, firsts)
    np.testing.assert_allclose(outs[3:, 1], outs_changed[3:, 1], rtol=1e-6)  # env 1 forgot
    assert not np.allclose(outs[3:, 0], outs_changed[3:, 0])  # env 0 remembers
    # A FIRST step ignores whatever state it is given.
    state = jax.tree.map(lambda x: x + 5.0, net.initial_state((4,)))
    _, from_junk = net.step(params, state, xs[0], jnp.ones(4, bool))
    _, from_zero = net.step(params, net.initial_state((4,)), xs[0], jnp.ones(4, bool))
    np.testing.assert_allclose(from_junk, from_zero, rtol=1e-6)


def test_feed_forward_is_the_degenerate_case():
    net = _net("none")
    params = net.init(jax.random.PRNGKey(0))
    assert net.initial_state((4,)) == () and not net.recurrent
    xs, firsts = _inputs()
    final, outs, states = net.unroll(params, (), xs, firsts)
    assert final == () and states == ()
    np.testing.assert_allclose(outs[2], net.step(params, (), xs[2], firsts[2])[1], rtol=1e-6)


def test_steps_accept_any_leading_batch_shape():
    net = _net("lstm")
    params = net.init(jax.random.PRNGKey(0))
    state = net.initial_state((7, 4))  # e.g. 7 candidate actions for 4 environments
    x = jnp.ones((7, 4, INPUT))
    new_state, out = net.step(params, state, x, jnp.zeros((7, 4), bool))
    assert out.shape == (7, 4, 3) and jax.tree.leaves(new_state)[0].shape == (7, 4, 6)


def test_stacked_networks_keep_their_own_parameters_and_states():
    towers = stack({"a": _net("gru"), "b": _net("none", DenseHead((), 1.0))})
    params = towers.init(jax.random.PRNGKey(0))
    assert set(params) == {"a", "b"}
    state = towers.initial_state((4,))
    assert state["b"] == () and jax.tree.leaves(state["a"])[0].shape == (4, 6)
    xs, firsts = _inputs()
    _, outs, _ = towers.unroll(params, state, xs, firsts)
    assert outs["a"].shape == (6, 4, 3) and outs["b"].shape == (6, 4)
    assert towers.recurrent


@pytest.mark.parametrize(
    "space, shape",
    [
        (gymnasium.spaces.Discrete(4), ()),
        (gymnasium.spaces.MultiDiscrete([3, 3, 3]), (3,)),
        (gymnasium.spaces.Box(-1.0, 1.0, (2,)), (2,)),
    ],
)
@pytest.mark.parametrize("std", ["parameter", "state"])
def test_the_policy_head_serves_every_action_space(space, shape, std):
    spec = action_spec_from_space(space)
    net = make_network(NetworkConfig(hidden_sizes=(8,)), PolicyHead(spec, std=std), INPUT)
    params = net.init(jax.random.PRNGKey(0))
    out = net.step(params, (), jnp.ones((4, INPUT)), jnp.zeros(4, bool))[1]
    dist = distributions.make(spec, out)
    action = dist.sample(jax.random.PRNGKey(1))
    assert action.shape == (4,) + shape
    assert dist.log_prob(action).shape == (4,)


def test_multi_categorical_log_prob_is_the_sum_of_the_controls():
    logits = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 4))  # [B, k, n]
    dist = distributions.MultiCategorical(logits)
    action = jax.random.randint(jax.random.PRNGKey(1), (5, 3), 0, 4)
    per_control = dist.log_prob_per_control(action)
    log_softmax = jax.nn.log_softmax(logits)
    expected = np.array([[log_softmax[b, k, action[b, k]] for k in range(3)] for b in range(5)])
    np.testing.assert_allclose(per_control, expected, rtol=1e-6)
    np.testing.assert_allclose(dist.log_prob(action), expected.sum(-1), rtol=1e-6)
    np.testing.assert_allclose(
        dist.entropy(),
        -np.sum(np.exp(log_softmax) * log_softmax, axis=(-1, -2)),
        rtol=1e-5,
    )


@settings(max_examples=40, deadline=None)
@given(
    temperature=st.one_of(
        st.just(0.0), st.floats(0.0, 1e-7), st.floats(1e-3, 10.0), st.just(1e-30)
    ),
    seed=st.integers(0, 2**16),
)
def test_every_temperature_gives_actions_inside_the_space(temperature, seed):
    key = jax.random.PRNGKey(seed)
    logits = jax.random.normal(key, (16, 5)) * 10
    action = distributions.Categorical(logits).sample(jax.random.fold_in(key, 1), temperature)
    assert bool(jnp.all((action >= 0) & (action < 5)))
    if temperature < distributions.GREEDY_BELOW:
        np.testing.assert_array_equal(action, jnp.argmax(logits, -1))
    squashed = distributions.TanhGaussian(logits[:, :2], jnp.zeros((16, 2)))
    box = squashed.sample(jax.random.fold_in(key, 2), temperature)
    assert bool(jnp.all(jnp.isfinite(box) & (jnp.abs(box) <= 1.0)))


def test_temperature_scales_the_logits_and_the_std():
    logits = jnp.array([[0.0, 1.0, 2.0]])
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    samples = jax.vmap(lambda k: distributions.Categorical(logits).sample(k, 0.5))(keys)
    frequencies = np.bincount(np.asarray(samples[:, 0]), minlength=3) / len(keys)
    np.testing.assert_allclose(frequencies, jax.nn.softmax(logits[0] / 0.5), atol=0.01)
    gaussian = distributions.Gaussian(jnp.zeros((1, 1)), jnp.zeros((1, 1)))
    draws = jax.vmap(lambda k: gaussian.sample(k, 0.3))(keys)
    assert float(jnp.std(draws)) == pytest.approx(0.3, rel=0.03)


def test_tanh_gaussian_kl_is_the_pre_tanh_gaussians():
    p = distributions.TanhGaussian(jnp.array([[0.3]]), jnp.log(jnp.array([[0.5]])))
    q = distributions.TanhGaussian(jnp.array([[-0.2]]), jnp.log(jnp.array([[0.8]])))
    closed = np.log(0.8 / 0.5) + (0.5**2 + 0.5**2) / (2 * 0.8**2) - 0.5
    np.testing.assert_allclose(p.kl(q), [closed], rtol=1e-5)
    assert float(p.kl(p)[0]) == 0.0
