"""One network interface: feed-forward as the degenerate case, cores reset at FIRST in step
and unroll alike, states before each step, stacked towers, the conv torso on images (every
agent's, and a conv PPO and DQN iteration on MinAtar), and the distributions module."""

import dataclasses

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import agents
from heron.agents import DQNConfig, PPOConfig
from heron.agents.base import ReplayConfig
from heron.configs import ConfigError
from heron.networks import (
    DenseHead,
    NetworkConfig,
    PolicyHead,
    distributions,
    make_network,
    stack,
)
from heron.specs import EnvSpec, action_spec_from_space
from heron.training import RunConfig

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
            np.testing.assert_allclose(b[t], a, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(final), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


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
    # One step and the unroll multiply matrices of different shapes, so their sums may be
    # blocked differently on another CPU: equal to float32 rounding, not bit for bit.
    np.testing.assert_allclose(
        outs[2], net.step(params, (), xs[2], firsts[2])[1], rtol=1e-5, atol=1e-6
    )


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


# ------------------------------------------------------------------------- the conv torso

IMAGE = (10, 10, 4)  # MinAtar Breakout's [H, W, C]


def _conv(observation_shape=IMAGE, extra_size=0, **overrides):
    config = NetworkConfig(torso="conv", hidden_sizes=(8,), activation="relu", **overrides)
    return make_network(config, DenseHead((3,), 1.0), observation_shape, extra_size)


def _shapes(params):
    return jax.tree.map(lambda x: x.shape, params["params"])


def test_the_conv_torso_reads_images_and_flattens_its_feature_maps_into_the_mlp():
    net = _conv(conv_channels=(16, 16), conv_kernel_sizes=(3, 3), conv_strides=(1, 2))
    params = net.init(jax.random.PRNGKey(0))
    torso = _shapes(params)["ConvTorso_0"]
    assert torso["Conv_0"] == {"kernel": (3, 3, 4, 16), "bias": (16,)}
    assert torso["Conv_1"] == {"kernel": (3, 3, 16, 16), "bias": (16,)}
    # 10 -> 8 (3x3, stride 1, VALID) -> 3 (3x3, stride 2): 3 * 3 * 16 features
    assert torso["Torso_0"]["Dense_0"] == {"kernel": (3 * 3 * 16, 8), "bias": (8,)}
    images = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (5, 2) + IMAGE)  # bool, as MinAtar
    out = net.step(params, (), images, jnp.zeros((5, 2), bool))[1]
    assert out.shape == (5, 2, 3)
    one = net.step(params, (), images[3, 1], jnp.zeros((), bool))[1]  # any batch shape
    np.testing.assert_allclose(one, out[3, 1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "shape, kernel, stride, padding",
    [
        ((2, 20, 20, 4), 8, 4, "VALID"),  # the Nature CNN's first layer, sides that divide
        ((2, 11, 13, 3), 4, 3, "VALID"),  # a row and columns no output reads
        ((2, 10, 10, 4), 3, 1, "VALID"),  # MinAtar's
        ((2, 9, 9, 5), 3, 1, "SAME"),  # IMPALA's
    ],
)
def test_the_torsos_convolutions_have_autodiffs_values_and_gradients(
    shape, kernel, stride, padding
):
    """The torsos' convs compute their gradients as canonical convolutions (XLA:CPU's are
    slow in a loop otherwise: heron/networks/modules.py); values and gradients are lax's,
    inside a scan as outside."""
    from heron.networks.modules import conv_layer

    conv = conv_layer(6, kernel, stride, padding)
    plain = nn.Conv(6, (kernel, kernel), (stride, stride), padding=padding)
    x = jax.random.normal(jax.random.PRNGKey(0), (3, *shape))
    params = plain.init(jax.random.PRNGKey(1), x[0])
    assert jax.tree.map(jnp.shape, conv.init(jax.random.PRNGKey(1), x[0])) == jax.tree.map(
        jnp.shape, params
    )

    def gradients(module):
        loss = lambda params, x: jnp.sin(module.apply(params, x)).sum()  # noqa: E731
        step = lambda carry, x: (carry, jax.grad(loss, (0, 1))(params, x))  # noqa: E731
        return jax.jit(lambda x: jax.lax.scan(step, 0.0, x)[1])(x)

    np.testing.assert_allclose(conv.apply(params, x[0]), plain.apply(params, x[0]), rtol=1e-5)
    for ours, lax in zip(
        jax.tree.leaves(gradients(conv)), jax.tree.leaves(gradients(plain)), strict=True
    ):
        np.testing.assert_allclose(ours, lax, rtol=1e-4, atol=1e-5)


def test_the_conv_torso_stacks_a_history_into_channels():
    history = _conv((2, *IMAGE))
    image = _conv((10, 10, 8))
    params = history.init(jax.random.PRNGKey(0))
    assert _shapes(params) == _shapes(image.init(jax.random.PRNGKey(0)))
    stacked = jax.random.normal(jax.random.PRNGKey(1), (3, 2, *IMAGE))  # [B, history, H, W, C]
    channels = jnp.concatenate([stacked[:, 0], stacked[:, 1]], axis=-1)  # oldest first
    first = jnp.zeros(3, bool)
    np.testing.assert_allclose(
        history.step(params, (), stacked, first)[1],
        image.step(params, (), channels, first)[1],
        rtol=1e-5,
        atol=1e-6,
    )


def test_a_conv_critic_reads_its_extra_inputs_beside_the_feature_maps():
    net = _conv(extra_size=2, core="gru", core_size=6)
    params = net.init(jax.random.PRNGKey(0))
    assert _shapes(params)["ConvTorso_0"]["Torso_0"]["Dense_0"]["kernel"] == (8 * 8 * 16 + 2, 8)
    images, action = jnp.ones((4, *IMAGE)), jnp.ones((4, 2))
    state, out = net.step(params, net.initial_state((4,)), (images, action), jnp.ones(4, bool))
    assert out.shape == (4, 3) and state.shape == (4, 6)
    _, other = net.step(params, net.initial_state((4,)), (images, -action), jnp.ones(4, bool))
    assert not np.allclose(out, other)  # the action reaches the output


@pytest.mark.parametrize(
    "shape, overrides, message",
    [
        (
            (4,),
            {},
            r"network.torso conv reads images \[H, W, C\].* shape \(4,\): use network.torso mlp",
        ),
        ((6, 7), {}, r"shape \(6, 7\)"),
        ((2, 3, 10, 10, 4), {}, r"shape \(2, 3, 10, 10, 4\)"),
        (
            IMAGE,
            {"conv_channels": (16, 16)},
            r"network.conv_channels \(16, 16\), network.conv_kernel_sizes \(3,\) and "
            r"network.conv_strides \(1,\) must have one entry per conv layer",
        ),
        (IMAGE, {"conv_kernel_sizes": (11,)}, r"leave no feature map of images \(10, 10, 4\)"),
    ],
)
def test_the_conv_torso_refuses_what_it_cannot_read(shape, overrides, message):
    with pytest.raises(ConfigError, match=message):
        _conv(shape, **overrides)


FRAMES = (84, 84, 4)  # Atari: four stacked 84x84 grey frames


def _kernels(observation_shape, torso, hidden_sizes):
    config = NetworkConfig(torso=torso, hidden_sizes=hidden_sizes, activation="relu")
    net = make_network(config, DenseHead((3,), 1.0), observation_shape)
    params = jax.eval_shape(net.init, jax.random.PRNGKey(0))
    return _shapes(params)


def test_nature_cnn_has_the_nature_dqns_layers():
    torso = _kernels(FRAMES, "nature_cnn", (512,))["ConvTorso_0"]
    assert [torso[f"Conv_{i}"]["kernel"] for i in range(3)] == [
        (8, 8, 4, 32),
        (4, 4, 32, 64),
        (3, 3, 64, 64),
    ]
    assert torso["Torso_0"]["Dense_0"]["kernel"] == (7 * 7 * 64, 512)
    count = sum(np.prod(shape) for shape in jax.tree.leaves(torso, is_leaf=_is_shape))
    assert count == 1_684_128  # SB3's NatureCNN(features_dim=512) on the same frames


def _is_shape(x):
    return isinstance(x, tuple) and all(isinstance(d, int) for d in x)


def test_impala_has_three_stacks_of_a_conv_a_pool_and_two_residual_blocks():
    torso = _kernels((64, 64, 3), "impala", (256,))["ImpalaTorso_0"]  # Procgen's frames
    convs = {name: layer["kernel"] for name, layer in torso.items() if name.startswith("Conv")}
    assert list(convs.values()) == [(3, 3, 3, 16), (3, 3, 16, 32), (3, 3, 32, 32)]
    blocks = [torso[f"ResidualBlock_{i}"] for i in range(6)]
    channels = [16, 16, 32, 32, 32, 32]
    for block, c in zip(blocks, channels, strict=True):
        assert [block[f"Conv_{j}"]["kernel"] for j in range(2)] == [(3, 3, c, c)] * 2
    # 64 -> 32 -> 16 -> 8 (each max-pool halves a side): CleanRL's 8 * 8 * 32 = 2048 features
    assert torso["Torso_0"]["Dense_0"]["kernel"] == (2048, 256)
    assert len(torso) == 3 + 6 + 1


@pytest.mark.parametrize(
    "torso, shape, overrides, message",
    [
        (
            "nature_cnn",
            FRAMES,
            {"conv_channels": (8,)},
            r"network.conv_channels sets the layers of network.torso conv; network.torso "
            r"nature_cnn has its own",
        ),
        ("impala", FRAMES, {"conv_strides": (2,)}, r"network.conv_strides sets the layers"),
        ("nature_cnn", IMAGE, {}, r"nature_cnn's layers .* leave no feature map of images"),
        ("impala", (84, 84), {}, r"network.torso impala reads images \[H, W, C\]"),
    ],
)
def test_the_named_image_torsos_refuse_what_they_would_ignore_or_cannot_read(
    torso, shape, overrides, message
):
    config = NetworkConfig(torso=torso, **overrides)
    with pytest.raises(ConfigError, match=message):
        make_network(config, DenseHead((3,), 1.0), shape)


@pytest.mark.parametrize("torso, shape", [("conv", IMAGE), ("mlp", (3, 3, 1))])
def test_uint8_images_reach_the_torso_scaled_to_0_1(torso, shape):
    """uint8 observations (images) stay bytes up to the network, which scales them: the same
    output as float32 images divided by 255."""
    config = NetworkConfig(torso=torso, hidden_sizes=(8,), activation="relu")
    net = make_network(config, DenseHead((3,), 1.0), shape)
    params = net.init(jax.random.PRNGKey(0))
    pixels = jax.random.randint(jax.random.PRNGKey(1), (5, *shape), 0, 256).astype(jnp.uint8)
    first = jnp.zeros(5, bool)
    as_bytes = net.step(params, (), pixels, first)[1]
    scaled = net.step(params, (), pixels.astype(jnp.float32) / 255.0, first)[1]
    np.testing.assert_allclose(as_bytes, scaled, rtol=1e-6)
    unscaled = net.step(params, (), pixels.astype(jnp.float32), first)[1]
    assert not np.allclose(as_bytes, unscaled)


def test_conv_fields_are_validated_under_the_agents_name():
    with pytest.raises(ConfigError, match=r"ppo.network.conv_channels must be one or more"):
        PPOConfig(network=NetworkConfig(conv_channels=()))
    with pytest.raises(ConfigError, match=r"dqn.network.conv_strides must be one or more"):
        DQNConfig(network=NetworkConfig(conv_strides=(0,)))
    with pytest.raises(ConfigError, match=r"shape \(4,\)"):  # an agent on CartPole's vectors
        agents.make("ppo", _image_spec((4,), gymnasium.spaces.Discrete(2)), _conv_config("ppo"))


def _image_spec(shape, action_space):
    return EnvSpec(shape, np.float32, action_spec_from_space(action_space))


def _conv_config(algo: str):
    network = NetworkConfig(torso="conv", conv_channels=(4,), hidden_sizes=(8,))
    return agents.config_class(algo)(network=network)


@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac", "svg0", "crr"])
def test_every_agent_gets_the_conv_torso_in_each_of_its_networks(algo):
    action_space = gymnasium.spaces.Discrete(3)
    if algo in ("sac", "svg0", "crr"):
        action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
    spec = _image_spec(IMAGE, action_space)
    state = jax.eval_shape(agents.make(algo, spec, _conv_config(algo)).init, jax.random.PRNGKey(0))
    kernels = {
        jax.tree_util.keystr(path): leaf.shape
        for path, leaf in jax.tree_util.tree_leaves_with_path(state)
        if "Conv_0']['kernel" in jax.tree_util.keystr(path)
        and "opt_state" not in jax.tree_util.keystr(path)
    }
    # ppo: policy and value towers; dqn: online and target; sac: the policy, the twin critics
    # and their targets; svg0, crr: policy, critic and a target of each
    towers = {"ppo": 2, "dqn": 2, "sac": 3, "svg0": 4, "crr": 4}[algo]
    assert len(kernels) == towers, kernels
    assert all(shape[-4:] == (3, 3, 4, 4) for shape in kernels.values()), kernels


@pytest.mark.parametrize(
    "algo, config",
    [
        ("ppo", PPOConfig(unroll_length=4, batch_size=8, num_epochs=1)),
        (
            "dqn",
            DQNConfig(
                batch_size=8,
                unroll_length=4,
                n_step=1,
                sequence_length=2,
                replay=ReplayConfig(min_size=8, ratio=1.0),
            ),
        ),
    ],
)
def test_a_conv_agent_trains_an_iteration_on_minatar(algo, config, tmp_path):
    import conftest

    from heron.api import train

    network = NetworkConfig(torso="conv", conv_channels=(4,), hidden_sizes=(8,))
    config = dataclasses.replace(config, network=network)
    run = RunConfig(
        env="gymnax:Breakout-MinAtar",
        steps=8,
        num_envs=2,
        n_evals=1,
        eval_temperatures=(0.0,),
        max_timestep_eval=8,
    )
    summary = train(conftest.build(algo, config, run), str(tmp_path / "run"))
    assert summary["steps"] == 8
    assert np.isfinite(summary["final_eval_return"])
