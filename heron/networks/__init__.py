"""Flax networks: torsos, heads and the policy-and-value network."""

from heron.networks.distributions import (
    action_distribution,
    greedy_action,
    sample_action,
)
from heron.networks.policy_value import MLP, PolicyValueNet

__all__ = ["MLP", "PolicyValueNet", "action_distribution", "greedy_action", "sample_action"]
