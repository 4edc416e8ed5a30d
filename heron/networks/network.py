"""One interface for feed-forward and recurrent networks (Acme's ``UnrollableNetwork``).

    net = make_network(NetworkConfig(core="lstm"), head, observation_shape)
    params = net.init(key)
    state = net.initial_state((B,))                      # () for feed-forward networks
    state, out = net.step(params, state, x, first)       # x [..., *observation_shape], first [...]
    state, outs, states = net.unroll(params, state, xs, firsts)   # xs [T, ..., *observation_shape]

A network is torso -> optional LSTM/GRU core -> head. It reads observations as the
environment gives them ([..., *observation_shape], any dtype): the torso decides how (the
MLP torsos flatten them, the conv torsos keep images [H, W, C]; uint8 images are scaled to
[0, 1] here, kept as bytes until then), so an agent hands its networks observations
untouched. A network made with ``extra_size`` reads pairs
``(observation, extra [..., extra_size])``: the extra features (a critic's encoded action)
join the observation's where the torso flattens them. The core's state resets to zeros
wherever ``first`` is true (an episode starts there), in ``step`` and ``unroll`` alike;
``unroll`` also returns the state *before* each step ([T, ...]), from which ``step`` can
re-evaluate any step with other inputs (a critic at sampled actions). Feed-forward networks
are the degenerate case: their state is ``()`` and ``unroll`` is one batched application.
Leading batch dimensions are arbitrary, so a state tiled over N candidates [N, B, size]
steps N candidates at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from heron.configs import ConfigError, choice, integer, registered, sizes
from heron.networks.modules import (
    ACTIVATIONS,
    CORES,
    IMAGE_TORSOS,
    NATURE_CNN_LAYERS,
    TORSOS,
    ConvTorso,
    Core,
    ImageFeatures,
    ImpalaTorso,
    Torso,
    conv_output_shape,
    zero_core_state,
)

EMBEDDING_SIZE = 16  # features of each Discrete part of a Dict observation
BODIES: dict[str, Callable] = {}  # a user's torsos by name: factory(NetworkConfig) -> module


def register_body(name: str, factory: Callable) -> None:
    """Makes ``name`` a torso any agent can use (``network.torso``; Trax's
    policy_and_value_model): ``factory(config)`` returns a flax module [..., D] -> [..., F]
    on the flattened float32 observations (a critic's encoded action beside them; reshape
    inside for images; uint8 images arrive scaled to [0, 1]), followed by the config's core
    and the agent's head. Register it again in every process that makes the network (to
    resume or evaluate a run)."""
    if name in TORSOS:
        raise ValueError(f"{name!r} is a built-in torso; choose another name")
    BODIES[name] = factory


def torso_names() -> tuple[str, ...]:
    return (*TORSOS, *BODIES)


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The shape of a network: torso, optional recurrent core (the head is the agent's)."""

    hidden_sizes: tuple[int, ...] = sizes((64, 64))
    """Hidden layer sizes of the torso."""
    activation: Literal["tanh", "relu", "elu", "gelu", "swish"] = choice("tanh", tuple(ACTIVATIONS))
    """Hidden activation (tanh, relu, elu, gelu, swish)."""
    torso: str = registered("mlp", torso_names)
    """mlp: Dense + activation (orthogonal init); layer_norm_mlp: Acme's LayerNormMLP; on
    image observations [H, W, C], then the mlp of hidden_sizes on their flattened feature
    maps: conv (conv layers of the conv_* fields), nature_cnn (the Nature DQN's three conv
    layers, for 84x84 frames), impala (IMPALA's residual network); or the name of a body
    registered with heron.networks.register_body."""
    conv_channels: tuple[int, ...] = sizes((16,))
    """Output channels of each conv layer (torso conv; nature_cnn and impala have their
    own)."""
    conv_kernel_sizes: tuple[int, ...] = sizes((3,))
    """Square kernel side of each conv layer (torso conv)."""
    conv_strides: tuple[int, ...] = sizes((1,))
    """Stride of each conv layer (torso conv)."""
    core: Literal["none", "lstm", "gru"] = choice("none", CORES)
    """Recurrent core after the torso (none, lstm, gru); its state resets where episodes
    start."""
    core_size: int = integer(64, 1)
    """Units of the recurrent core."""

    @property
    def recurrent(self) -> bool:
        return self.core != "none"


CONV_FIELDS = ("conv_channels", "conv_kernel_sizes", "conv_strides")


def conv_layers(config: NetworkConfig) -> tuple[tuple[int, ...], ...] | None:
    """(channels, kernel sizes, strides) of the conv layers of torso conv or nature_cnn (None
    for impala, whose residual stacks are fixed).
    Raises ConfigError where the conv_* fields are set for a torso that would ignore them."""
    if config.torso == "conv":
        return tuple(getattr(config, field) for field in CONV_FIELDS)
    default = NetworkConfig()
    changed = [f for f in CONV_FIELDS if getattr(config, f) != getattr(default, f)]
    if changed:
        raise ConfigError(
            f"network.{changed[0]} sets the layers of network.torso conv; network.torso "
            f"{config.torso} has its own: remove it, or use network.torso conv"
        )
    return NATURE_CNN_LAYERS if config.torso == "nature_cnn" else None


def image_shape(config: NetworkConfig, observation_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The [H, W, C] images an image torso reads from observations of ``observation_shape``:
    [H, W, C] as they are, [history, H, W, C] (``len_history_for_policy`` > 1) with the
    history stacked into channels [H, W, history * C]. Raises ConfigError for other shapes,
    for conv layers that leave no feature map and for conv_* fields the torso would ignore.
    A 2-D observation stacked with history ([history, H, W]) cannot be told from an image:
    give such images a channel axis."""
    if len(observation_shape) not in (3, 4):
        raise ConfigError(
            f"network.torso {config.torso} reads images [H, W, C] (or [history, H, W, C] with "
            f"len_history_for_policy > 1); these observations have shape "
            f"{tuple(observation_shape)}: use network.torso mlp"
        )
    *history, height, width, depth = observation_shape
    image = (height, width, math.prod(history) * depth)
    layers = conv_layers(config)
    if layers is None:  # impala: its stacks keep any image's feature maps
        return image
    if len({len(sizes) for sizes in layers}) != 1:
        raise ConfigError(
            f"network.conv_channels {config.conv_channels}, network.conv_kernel_sizes "
            f"{config.conv_kernel_sizes} and network.conv_strides {config.conv_strides} must "
            "have one entry per conv layer (the same length)"
        )
    out = conv_output_shape(image, *layers)
    if min(out) < 1:
        if config.torso == "nature_cnn":
            raise ConfigError(
                f"network.torso nature_cnn's layers (8x8 stride 4, 4x4 stride 2, 3x3) leave "
                f"no feature map of images {image}: it reads frames of 36x36 or more (Atari's "
                "84x84); use network.torso conv or impala for small images"
            )
        raise ConfigError(
            f"network.conv_kernel_sizes {config.conv_kernel_sizes} with network.conv_strides "
            f"{config.conv_strides} leave no feature map of images {image}: use smaller "
            "kernels or strides, or fewer layers"
        )
    return image


def as_float(observation):
    """Observations as float32: uint8 images scaled to [0, 1] (their bytes are kept until here,
    in the source and the replay), any other dtype cast."""
    if observation.dtype == jnp.uint8:
        return observation.astype(jnp.float32) / 255.0
    return observation.astype(jnp.float32)


def as_image(observation_shape: tuple[int, ...], observation):
    """Observations [..., *observation_shape] -> float32 images [..., H, W, C] (``as_float``),
    a history axis [..., history, H, W, C] stacked into channels [..., H, W, history * C]."""
    if len(observation_shape) == 4:
        observation = jnp.moveaxis(observation, -4, -2)  # [..., H, W, history, C]
        observation = observation.reshape(observation.shape[:-2] + (-1,))
    return as_float(observation)


def check_parts(config: NetworkConfig, observation_shape: tuple[int, ...], parts) -> None:
    """ConfigError where an image torso finds no image [H, W, C] among a Dict observation's
    ``parts`` (observations [..., (history,) D]), or cannot read one of them."""
    if config.torso not in IMAGE_TORSOS:
        return
    history = tuple(observation_shape[:-1])
    images = [part for part in parts if len(part.shape) == 3]
    if not images:
        found = ", ".join(f"{part.name} {part.shape}" for part in parts)
        raise ConfigError(
            f"network.torso {config.torso} reads images [H, W, C]; no part of these Dict "
            f"observations is one ({found}): use network.torso mlp"
        )
    for part in images:
        image_shape(config, history + part.shape)


def encoded_parts(config: NetworkConfig, observation_shape: tuple[int, ...], parts, observation):
    """Flattened Dict observations [..., (history,) D] -> each part encoded by itself and
    all joined, [..., F] (SB3's CombinedExtractor): an embedding of EMBEDDING_SIZE for a
    Discrete part, the image torso's conv layers for an image part [H, W, C] under an image
    torso (each image its own), the values as they are for the rest; uint8 images scaled to
    [0, 1]. With history, each part's encodings of the stacked steps are joined (images
    stacked into channels). Call it inside a compact module: it makes the encoders there."""
    history = tuple(observation_shape[:-1])
    batch = observation.shape[: observation.ndim - len(observation_shape)]
    values = as_float(observation)  # a uint8 observation holds images only, now scaled
    features, offset = [], 0
    for part in parts:
        x = values[..., offset : offset + part.size]
        offset += part.size
        if part.image and observation.dtype != jnp.uint8:
            x = x / 255.0
        if part.categories is not None:
            x = nn.Embed(part.categories, EMBEDDING_SIZE)(x[..., 0].astype(jnp.int32))
        elif len(part.shape) == 3 and config.torso in IMAGE_TORSOS:
            x = as_image(history + part.shape, x.reshape(batch + history + part.shape))
            x = ImageFeatures(conv_layers(config), config.activation)(x)
        features.append(x.reshape(batch + (-1,)))
    return jnp.concatenate(features, axis=-1)


class _Module(nn.Module):
    config: NetworkConfig
    head: nn.Module
    observation_shape: tuple[int, ...]
    observation_parts: tuple = ()

    @nn.compact
    def __call__(self, state, x, first):
        config = self.config
        observation, extra = x if isinstance(x, tuple) else (x, None)
        if self.observation_parts:
            x = encoded_parts(config, self.observation_shape, self.observation_parts, observation)
            if extra is not None:
                x = jnp.concatenate([x, extra], axis=-1)
            if config.torso in BODIES:
                x = BODIES[config.torso](config)(x)
            else:
                style = "mlp" if config.torso in IMAGE_TORSOS else config.torso
                x = Torso(config.hidden_sizes, config.activation, style)(x)
        elif config.torso in IMAGE_TORSOS:
            image = as_image(self.observation_shape, observation)
            if config.torso == "impala":
                torso = ImpalaTorso(config.hidden_sizes, config.activation)
            else:
                torso = ConvTorso(*conv_layers(config), config.hidden_sizes, config.activation)
            x = torso(image, extra)
        else:
            x = flat_observation(self.observation_shape, observation)
            if extra is not None:
                x = jnp.concatenate([x, extra], axis=-1)
            if config.torso in BODIES:
                x = BODIES[config.torso](config)(x)
            else:
                x = Torso(config.hidden_sizes, config.activation, config.torso)(x)
        if config.recurrent:
            state, x = Core(config.core, config.core_size)(state, x, first)
        return state, self.head(x)


class Network(NamedTuple):
    """init(key) -> params; initial_state(batch_shape) -> state;
    step(params, state, x [..., *obs], first [...]) -> (state, out);
    unroll(params, state, xs [T, ..., *obs], firsts [T, ...]) -> (state, outs [T, ...],
    states before each step [T, ...]). With extra inputs, x is (observation, extra)."""

    init: Callable
    initial_state: Callable
    step: Callable
    unroll: Callable
    recurrent: bool


def make_network(
    config: NetworkConfig,
    head: nn.Module,
    observation_shape: int | tuple[int, ...],
    extra_size: int = 0,
    observation_parts: tuple = (),
) -> Network:
    """A network on observations [..., *observation_shape] (an int: flat vectors of that
    size), with ``extra_size`` extra features beside them when above 0 (inputs
    ``(observation, extra)``), ending in ``head``. ``observation_parts`` (EnvSpec's) are
    the parts of flattened Dict observations, encoded each by itself (``encoded_parts``).
    Raises ConfigError where the torso cannot read such observations (see ``image_shape``
    and ``check_parts``)."""
    if isinstance(observation_shape, int):
        observation_shape = (observation_shape,)
    observation_shape = tuple(observation_shape)
    observation_parts = tuple(observation_parts)
    if observation_parts:
        check_parts(config, observation_shape, observation_parts)
    elif config.torso in IMAGE_TORSOS:
        image_shape(config, observation_shape)
    module = _Module(config, head, observation_shape, observation_parts)

    def initial_state(batch_shape) -> Any:
        batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
        return zero_core_state(config.core, batch_shape, config.core_size)

    def init(key):
        x = jnp.zeros((1, *observation_shape), jnp.float32)
        if extra_size:
            x = (x, jnp.zeros((1, extra_size), jnp.float32))
        return module.init(key, initial_state((1,)), x, jnp.ones((1,), bool))

    def step(params, state, x, first):
        if config.recurrent:
            return module.apply(params, state, x, first)
        return _on_flat_batch(module.apply, len(observation_shape), params, state, x, first)

    def unroll(params, state, xs, firsts):
        if not config.recurrent:
            return state, step(params, state, xs, firsts)[1], ()

        def one(state, inputs):
            new_state, out = step(params, state, *inputs)
            return new_state, (out, state)

        state, (outs, states) = jax.lax.scan(one, state, (xs, firsts))
        return state, outs, states

    return Network(init, initial_state, step, unroll, config.recurrent)


def _on_flat_batch(apply: Callable, observation_ndim: int, params, state, x, first):
    """``apply`` of a feed-forward network on inputs whose batch dimensions [..., *obs]
    (e.g. [T, B] sequences) are merged into one, outputs reshaped back. XLA:CPU multiplies
    a layer's 2-D inputs faster than 3-D ones: SAC's update on HalfCheetah's sizes took
    3.84 ms with [1, B] inputs, 3.38 ms merged, 3.26 ms for a plain flax SAC
    (``benchmarks/update_floor.py``, named ``sac_update.py`` then; 2026-12-06)."""
    observation = x[0] if isinstance(x, tuple) else x
    batch = observation.shape[: observation.ndim - observation_ndim]
    if len(batch) == 1:
        return apply(params, state, x, first)
    size = math.prod(batch)

    def merged(array):
        return array.reshape((size, *array.shape[len(batch) :]))

    state, out = apply(params, state, jax.tree.map(merged, x), jax.tree.map(merged, first))
    return state, jax.tree.map(lambda y: y.reshape(batch + y.shape[1:]), out)


def stack(networks: dict[str, Network]) -> Network:
    """Several networks on the same inputs as one: params, states and outputs are dicts
    keyed like ``networks`` (e.g. PPO's policy and value towers)."""

    def init(key):
        keys = jax.random.split(key, len(networks))
        return {name: net.init(k) for (name, net), k in zip(networks.items(), keys, strict=True)}

    def initial_state(batch_shape):
        return {name: net.initial_state(batch_shape) for name, net in networks.items()}

    def step(params, state, x, first):
        results = {
            name: net.step(params[name], state[name], x, first) for name, net in networks.items()
        }
        return {n: r[0] for n, r in results.items()}, {n: r[1] for n, r in results.items()}

    def unroll(params, state, xs, firsts):
        results = {
            name: net.unroll(params[name], state[name], xs, firsts)
            for name, net in networks.items()
        }
        return tuple({n: r[i] for n, r in results.items()} for i in range(3))

    recurrent = any(net.recurrent for net in networks.values())
    return Network(init, initial_state, step, unroll, recurrent)


def flat_observation(observation_shape: tuple[int, ...], observation):
    """Observations [..., *observation_shape] -> float32 [..., prod(observation_shape)]
    (``as_float``)."""
    batch = observation.shape[: observation.ndim - len(observation_shape)]
    return as_float(observation.reshape(batch + (-1,)))
