"""One interface for feed-forward and recurrent networks (Acme's ``UnrollableNetwork``).

    net = make_network(NetworkConfig(core="lstm"), head, input_size)
    params = net.init(key)
    state = net.initial_state((B,))                      # () for feed-forward networks
    state, out = net.step(params, state, x, first)       # x [..., D], first [...]
    state, outs, states = net.unroll(params, state, xs, firsts)   # xs [T, ..., D]

A network is torso -> optional LSTM/GRU core -> head. The core's state resets to zeros
wherever ``first`` is true (an episode starts there), in ``step`` and ``unroll`` alike;
``unroll`` also returns the state *before* each step ([T, ...]), from which ``step`` can
re-evaluate any step with other inputs (a critic at sampled actions). Feed-forward networks
are the degenerate case: their state is ``()`` and ``unroll`` is one batched application.
Leading batch dimensions are arbitrary, so a state tiled over N candidates [N, B, size]
steps N candidates at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from heron.configs import choice, integer, registered, sizes
from heron.networks.modules import ACTIVATIONS, CORES, TORSOS, Core, Torso, zero_core_state

BODIES: dict[str, Callable] = {}  # a user's torsos by name: factory(NetworkConfig) -> module


def register_body(name: str, factory: Callable) -> None:
    """Makes ``name`` a torso any agent can use (``network.torso``; Trax's
    policy_and_value_model): ``factory(config)`` returns a flax module [..., D] -> [..., F]
    on the flattened inputs the agent gives it (reshape inside for images), followed by the
    config's core and the agent's head. Register it again in every process that makes the
    network (to resume or evaluate a run)."""
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
    activation: Literal["tanh", "relu", "elu", "gelu"] = choice("tanh", tuple(ACTIVATIONS))
    """Hidden activation (tanh, relu, elu, gelu)."""
    torso: str = registered("mlp", torso_names)
    """mlp: Dense + activation (orthogonal init); layer_norm_mlp: Acme's LayerNormMLP; or the
    name of a body registered with heron.networks.register_body."""
    core: Literal["none", "lstm", "gru"] = choice("none", CORES)
    """Recurrent core after the torso (none, lstm, gru); its state resets where episodes
    start."""
    core_size: int = integer(64, 1)
    """Units of the recurrent core."""

    @property
    def recurrent(self) -> bool:
        return self.core != "none"


class _Module(nn.Module):
    config: NetworkConfig
    head: nn.Module

    @nn.compact
    def __call__(self, state, x, first):
        config = self.config
        if config.torso in BODIES:
            x = BODIES[config.torso](config)(x)
        else:
            x = Torso(config.hidden_sizes, config.activation, config.torso)(x)
        if config.recurrent:
            state, x = Core(config.core, config.core_size)(state, x, first)
        return state, self.head(x)


class Network(NamedTuple):
    """init(key) -> params; initial_state(batch_shape) -> state;
    step(params, state, x [..., D], first [...]) -> (state, out);
    unroll(params, state, xs [T, ..., D], firsts [T, ...]) -> (state, outs [T, ...],
    states before each step [T, ...])."""

    init: Callable
    initial_state: Callable
    step: Callable
    unroll: Callable
    recurrent: bool


def make_network(config: NetworkConfig, head: nn.Module, input_size: int) -> Network:
    """A network on inputs [..., input_size] ending in ``head``."""
    module = _Module(config, head)

    def initial_state(batch_shape) -> Any:
        batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
        return zero_core_state(config.core, batch_shape, config.core_size)

    def init(key):
        x = jnp.zeros((1, input_size), jnp.float32)
        return module.init(key, initial_state((1,)), x, jnp.ones((1,), bool))

    def step(params, state, x, first):
        return module.apply(params, state, x, first)

    def unroll(params, state, xs, firsts):
        if not config.recurrent:
            return state, step(params, state, xs, firsts)[1], ()

        def one(state, inputs):
            new_state, out = step(params, state, *inputs)
            return new_state, (out, state)

        state, (outs, states) = jax.lax.scan(one, state, (xs, firsts))
        return state, outs, states

    return Network(init, initial_state, step, unroll, config.recurrent)


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
    """Observations [..., *observation_shape] -> float32 [..., prod(observation_shape)]."""
    batch = observation.shape[: observation.ndim - len(observation_shape)]
    return observation.reshape(batch + (-1,)).astype(jnp.float32)
