"""Flax modules: the torsos (MLP, convolutional), the recurrent core, and the heads networks
end in.

MLP torsos come in two styles: ``mlp`` (CleanRL's: Dense + activation per layer, orthogonal
initialisers) and ``layer_norm_mlp`` (Acme's LayerNormMLP: Dense -> LayerNorm -> tanh, then
Dense + activation, Flax's default initialisers). The image torsos read [H, W, C] images:
``conv`` (conv layers of the config's sizes), ``nature_cnn`` (the DQN Nature paper's three
layers, Mnih et al. 2015, as SB3's NatureCNN and CleanRL's Atari networks) and ``impala``
(IMPALA's residual network, Espeholt et al. 2018: three stacks of conv, max-pool and two
residual blocks), each followed by the ``mlp`` torso on the flattened feature maps.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from heron.specs import ActionSpec

ACTIVATIONS = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "swish": nn.swish,  # Brax's and MuJoCo Playground's networks
}
IMAGE_TORSOS = ("conv", "nature_cnn", "impala")
TORSOS = ("mlp", "layer_norm_mlp", *IMAGE_TORSOS)
# (channels, kernel sizes, strides) of the Nature DQN's conv layers: 84x84 frames -> 7x7x64
NATURE_CNN_LAYERS = ((32, 64, 64), (8, 4, 3), (4, 2, 1))
IMPALA_CHANNELS = (16, 32, 32)  # of IMPALA's three stacks
CORES = ("none", "lstm", "gru")
LOG_STD_RANGE = (-5.0, 2.0)  # state-dependent log-stds are clipped to it


def orthogonal_dense(features: int, scale: float | None) -> nn.Dense:
    """Dense with orthogonal(scale) kernels; zeros when scale is 0; Flax's default (LeCun
    normal) when scale is None."""
    if scale is None:
        return nn.Dense(features)
    if scale == 0.0:
        return nn.Dense(features, kernel_init=nn.initializers.zeros)
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(scale))


class Torso(nn.Module):
    """[..., D] -> [..., hidden_sizes[-1]] (or [..., D] with no hidden layers)."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    style: str = "mlp"

    @nn.compact
    def __call__(self, x):
        act = ACTIVATIONS[self.activation]
        for index, size in enumerate(self.hidden_sizes):
            if self.style == "mlp":
                x = act(orthogonal_dense(size, np.sqrt(2))(x))
            elif index == 0:
                x = nn.tanh(nn.LayerNorm()(nn.Dense(size)(x)))
            else:
                x = act(nn.Dense(size)(x))
        return x


_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, kernel, stride: int, precision):
    return jax.lax.conv_general_dilated(
        x, kernel, (stride, stride), "VALID", dimension_numbers=_NHWC, precision=precision
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv_with_canonical_gradients(x, kernel, stride: int, precision):
    """A VALID 2-D convolution [N, H, W, C] x [k, k, C, O] whose gradients are computed as
    convolutions in the canonical layout (batch first, features last). XLA:CPU runs the
    ones autodiff makes (the kernel's gradient treats the images' channels as the batch)
    as they are inside a loop's body, without its fast convolution: in a training
    iteration's scan, the Nature CNN's gradient on 256 frames took 6.6 s instead of 0.47."""
    return _conv(x, kernel, stride, precision)


def _conv_forward(x, kernel, stride, precision):
    return _conv(x, kernel, stride, precision), (x, kernel)


def _conv_backward(stride, precision, residuals, dy):
    x, kernel = residuals
    kh, kw = kernel.shape[:2]
    # rows and columns of x that no output reads (VALID with a stride that does not divide)
    rh = x.shape[1] - (dy.shape[1] - 1) * stride - kh
    rw = x.shape[2] - (dy.shape[2] - 1) * stride - kw
    # d kernel: the channels of x as the batch, the images as the features, dy (dilated by
    # the stride) as the kernel
    dkernel = jax.lax.conv_general_dilated(
        x.transpose(3, 1, 2, 0), dy.transpose(1, 2, 0, 3), (1, 1), "VALID",
        rhs_dilation=(stride, stride), dimension_numbers=_NHWC, precision=precision,
    )  # fmt: skip
    dkernel = dkernel[:, :kh, :kw, :].transpose(1, 2, 0, 3)
    # d x: dy dilated by the stride and padded, with the flipped kernel, in and out swapped
    dx = jax.lax.conv_general_dilated(
        dy, jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2), (1, 1),
        ((kh - 1, kh - 1 + rh), (kw - 1, kw - 1 + rw)), lhs_dilation=(stride, stride),
        dimension_numbers=_NHWC, precision=precision,
    )  # fmt: skip
    return dx, dkernel


_conv_with_canonical_gradients.defvjp(_conv_forward, _conv_backward)


def _conv_for_flax(inputs, kernel, strides, padding, lhs_dilation=None, rhs_dilation=None,
                   dimension_numbers=None, feature_group_count=1, precision=None):  # fmt: skip
    """``lax.conv_general_dilated`` as ``nn.Conv`` calls it, for the square-strided 2-D
    convolutions of the torsos: the images padded, then ``_conv_with_canonical_gradients``
    (on XLA:CPU only; on accelerators autodiff's convolutions are taken as they are)."""
    window = kernel.shape[:2]
    plain = (
        jax.default_backend() != "cpu"
        or inputs.ndim != 4
        or strides[0] != strides[1]
        or any(d not in (None, (1, 1)) for d in (lhs_dilation, rhs_dilation))
        or feature_group_count != 1
    )
    if plain:
        return jax.lax.conv_general_dilated(
            inputs, kernel, strides, padding, lhs_dilation, rhs_dilation,
            dimension_numbers, feature_group_count, precision=precision,
        )  # fmt: skip
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(inputs.shape[1:3], window, strides, padding)
    if any(tuple(pad) != (0, 0) for pad in padding):
        inputs = jnp.pad(inputs, ((0, 0), *padding, (0, 0)))
    return _conv_with_canonical_gradients(inputs, kernel, strides[0], precision)


def conv_layer(features: int, kernel: int, stride: int = 1, padding: str = "VALID", **init):
    """``nn.Conv`` (its parameters, names and forward pass) with ``_conv_for_flax``."""
    return nn.Conv(
        features, (kernel, kernel), (stride, stride), padding=padding,
        conv_general_dilated=_conv_for_flax, **init,
    )  # fmt: skip


class ConvTorso(nn.Module):
    """Images [..., H, W, C] -> [..., hidden_sizes[-1]]: conv layers (VALID padding, as
    MinAtar's DQN network; orthogonal(sqrt 2) kernels, as CleanRL's Atari network), each
    followed by the activation, then the ``mlp`` torso on the flattened feature maps, with
    ``extra`` features [..., E] (a critic's action) beside them where given."""

    channels: Sequence[int]
    kernel_sizes: Sequence[int]
    strides: Sequence[int]
    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, image, extra=None):
        x, batch = _images(image)
        x = _conv_layers(x, self.channels, self.kernel_sizes, self.strides, self.activation)
        return _dense_on_features(x, batch, extra, self.hidden_sizes, self.activation)


def _conv_layers(x, channels, kernel_sizes, strides, activation):
    """ConvTorso's conv layers on images [N, H, W, C] (made in the calling module)."""
    act = ACTIVATIONS[activation]
    for features, kernel, stride in zip(channels, kernel_sizes, strides, strict=True):
        conv = conv_layer(
            features, kernel, stride, kernel_init=nn.initializers.orthogonal(np.sqrt(2))
        )
        x = act(conv(x))
    return x


def _impala_stacks(x, channels):
    """ImpalaTorso's stacks on images [N, H, W, C], then ReLU (made in the calling module)."""
    for features in channels:
        x = conv_layer(features, 3, padding="SAME")(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        x = ResidualBlock()(x)
        x = ResidualBlock()(x)
    return nn.relu(x)


def _images(image):
    """[..., H, W, C] -> ([N, H, W, C] with one batch axis, as nn.Conv takes them, the batch
    shape [...])."""
    return image.reshape((-1, *image.shape[-3:])), image.shape[:-3]


def _dense_on_features(x, batch, extra, hidden_sizes, activation):
    """Feature maps [N, ...] -> [..., hidden_sizes[-1]]: flattened per image, ``extra``
    features beside them where given, then the ``mlp`` torso."""
    x = x.reshape(batch + (-1,))
    if extra is not None:
        x = jnp.concatenate([x, extra], axis=-1)
    return Torso(hidden_sizes, activation, "mlp")(x)


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convs keeping the shape (IMPALA's)."""

    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        y = conv_layer(channels, 3, padding="SAME")(nn.relu(x))
        y = conv_layer(channels, 3, padding="SAME")(nn.relu(y))
        return x + y


class ImpalaTorso(nn.Module):
    """Images [..., H, W, C] -> [..., hidden_sizes[-1]]: IMPALA's network (Espeholt et al.
    2018, as CleanRL's and Procgen's baselines): per stack a 3x3 conv, a 3x3 max-pool of
    stride 2 and two residual blocks; then ReLU and the ``mlp`` torso on the flattened
    feature maps (``extra`` features beside them where given). Flax's default initialisers
    in the convs, as CleanRL's JAX version."""

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    channels: Sequence[int] = IMPALA_CHANNELS

    @nn.compact
    def __call__(self, image, extra=None):
        x, batch = _images(image)
        x = _impala_stacks(x, self.channels)
        return _dense_on_features(x, batch, extra, self.hidden_sizes, self.activation)


class ImageFeatures(nn.Module):
    """Images [..., H, W, C] -> their feature maps, flattened [..., F]: ConvTorso's conv
    layers (``layers``: channels, kernel sizes, strides) or, with ``layers`` None,
    ImpalaTorso's stacks; no MLP (one image part of a Dict observation, whose features join
    the other parts' before the MLP)."""

    layers: tuple | None
    activation: str = "relu"

    @nn.compact
    def __call__(self, image):
        x, batch = _images(image)
        if self.layers is None:
            x = _impala_stacks(x, IMPALA_CHANNELS)
        else:
            x = _conv_layers(x, *self.layers, self.activation)
        return x.reshape(batch + (-1,))


def conv_output_shape(
    image_shape: tuple[int, int, int], channels, kernel_sizes, strides
) -> tuple[int, int, int]:
    """[H, W, C] after VALID conv layers: each side (size - kernel) // stride + 1."""
    height, width, depth = image_shape
    for features, kernel, stride in zip(channels, kernel_sizes, strides, strict=True):
        height, width = ((side - kernel) // stride + 1 for side in (height, width))
        depth = features
    return height, width, depth


def zero_core_state(core: str, batch_shape: tuple[int, ...], size: int):
    """The initial state of a core: (c, h) for an LSTM, h for a GRU, [*batch, size] each;
    () without a core."""
    if core == "none":
        return ()
    zeros = jnp.zeros(tuple(batch_shape) + (size,), jnp.float32)
    return (zeros, zeros) if core == "lstm" else zeros


def reset_where(first, state, initial):
    """``initial`` where ``first`` [...] is true, ``state`` [..., size] elsewhere."""
    return jax.tree.map(lambda s, i: jnp.where(first[..., None], i, s), state, initial)


class Core(nn.Module):
    """An LSTM or GRU cell whose state resets to zeros where an episode starts."""

    core: str
    size: int

    @nn.compact
    def __call__(self, state, x, first):
        state = reset_where(first, state, zero_core_state(self.core, first.shape, self.size))
        cell = nn.OptimizedLSTMCell if self.core == "lstm" else nn.GRUCell
        return cell(self.size)(state, x)


class DenseHead(nn.Module):
    """features [..., F] -> [..., *shape] (shape () gives a scalar per input)."""

    shape: tuple[int, ...] = ()
    scale: float | None = None  # see orthogonal_dense

    @nn.compact
    def __call__(self, features):
        out = orthogonal_dense(int(np.prod(self.shape, dtype=int)), self.scale)(features)
        return out.reshape(features.shape[:-1] + tuple(self.shape))


class PolicyHead(nn.Module):
    """The head of every policy: logits [..., n] (Discrete) or [..., k, n] (k equal
    controls), or ``{"mean", "log_std"}`` [..., d] (Box). ``std`` chooses a state-independent
    log-std parameter starting at ``initial_log_std`` (``"parameter"``, PPO's) or one computed
    from the features (``"state"``, clipped to LOG_STD_RANGE; SAC's, CRR's)."""

    spec: ActionSpec
    std: str = "parameter"
    scale: float = 0.01
    initial_log_std: float = 0.0

    @nn.compact
    def __call__(self, features):
        spec = self.spec
        if spec.is_discrete:
            shape = (spec.n_controls, spec.n_actions) if spec.multi_control else (spec.n_actions,)
            return DenseHead(shape, self.scale)(features)
        size = int(np.prod(spec.shape))
        mean = orthogonal_dense(size, self.scale)(features)
        if self.std == "parameter":
            log_std = jnp.broadcast_to(
                self.param("log_std", nn.initializers.constant(self.initial_log_std), (size,)),
                mean.shape,
            )
        else:
            log_std = jnp.clip(orthogonal_dense(size, 0.0)(features), *LOG_STD_RANGE)
        return {"mean": mean, "log_std": log_std}


class Heads(nn.Module):
    """Several heads on the same features: {name: head(features)}."""

    heads: dict

    def __call__(self, features):
        return {name: head(features) for name, head in self.heads.items()}
