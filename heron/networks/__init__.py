"""Networks: one interface for feed-forward and recurrent networks, their torsos, cores and
heads, and one distributions module."""

from heron.networks import distributions
from heron.networks.modules import CORES, DenseHead, Heads, PolicyHead
from heron.networks.network import (
    Network,
    NetworkConfig,
    flat_observation,
    make_network,
    register_body,
    stack,
)

__all__ = [
    "CORES",
    "DenseHead",
    "Heads",
    "Network",
    "NetworkConfig",
    "PolicyHead",
    "distributions",
    "flat_observation",
    "make_network",
    "register_body",
    "stack",
]
