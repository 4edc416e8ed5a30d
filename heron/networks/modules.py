"""Flax modules: the torsos (MLP, convolutional), the recurrent core, and the heads networks
end in.

MLP torsos come in two styles: ``mlp`` (CleanRL's: Dense + activation per layer, orthogonal
initialisers) and ``layer_norm_mlp`` (Acme's LayerNormMLP: Dense -> LayerNorm -> tanh, then
Dense + activation, Flax's default initialisers). ``conv`` reads images: conv layers, then
the ``mlp`` torso on the flattened feature maps.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from heron.specs import ActionSpec

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu, "gelu": nn.gelu}
TORSOS = ("mlp", "layer_norm_mlp", "conv")
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
        act = ACTIVATIONS[self.activation]
        batch = image.shape[:-3]
        x = image.reshape((-1, *image.shape[-3:]))  # [N, H, W, C]: one batch axis for nn.Conv
        for features, kernel, stride in zip(
            self.channels, self.kernel_sizes, self.strides, strict=True
        ):
            conv = nn.Conv(
                features,
                (kernel, kernel),
                (stride, stride),
                padding="VALID",
                kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
            )
            x = act(conv(x))
        x = x.reshape(batch + (-1,))
        if extra is not None:
            x = jnp.concatenate([x, extra], axis=-1)
        return Torso(self.hidden_sizes, self.activation, "mlp")(x)


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
