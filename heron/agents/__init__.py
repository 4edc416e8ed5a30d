"""Agents by name: ``make(name, spec, config)``; one file per algorithm, which registers
itself (``register``): every module of this package is imported with it. A module of yours
registers more the same way."""

from __future__ import annotations

import importlib
import pkgutil

from heron.agents.base import MASKS_ACTIONS, REGISTRY, Agent, ConfigError, ReplayConfig, register
from heron.networks import NetworkConfig

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

from heron.agents.crr import CRRConfig  # noqa: E402  (the built-in configs, by name)
from heron.agents.dqn import DQNConfig  # noqa: E402
from heron.agents.ppo import PPOConfig  # noqa: E402
from heron.agents.sac import SACConfig  # noqa: E402
from heron.agents.svg0 import SVG0Config  # noqa: E402
from heron.agents.td3 import TD3Config  # noqa: E402


class UnknownAgentError(ValueError):
    """An algorithm name heron does not know."""


def config_class(name: str):
    if name not in REGISTRY:
        raise UnknownAgentError(
            f"unknown algorithm {name!r}; available: {', '.join(sorted(REGISTRY))}"
        )
    return REGISTRY[name][0]


def make(name: str, spec, config=None, devices=None, collects: bool = True) -> Agent:
    """The agent ``name`` for environments of ``spec``; its updates are split over
    ``devices`` (default: every device JAX sees). ``collects=False`` (learning from a
    dataset) refuses options that only change how experience is collected."""
    config_type = config_class(name)
    config = config_type() if config is None else config
    if not isinstance(config, config_type):
        raise TypeError(f"{name} needs a {config_type.__name__}, got {type(config).__name__}")
    if not collects:
        refuse_collecting_options(name, config)
    if getattr(spec, "action_mask", False) and name not in MASKS_ACTIONS:
        raise ConfigError(
            f"this environment gives action masks (the legal actions of each step), which "
            f"{name} would ignore and take illegal actions; the algorithms that act on them: "
            f"{', '.join(sorted(MASKS_ACTIONS))}"
        )
    return REGISTRY[name][1](spec, config, devices)


def refuse_collecting_options(name: str, config) -> None:
    """A run that collects nothing refuses every option its agent's config declares as
    only changing how experience is collected (``collecting``), set to other than its
    default."""
    default = type(config)()
    for option, what in getattr(type(config), "collecting", {}).items():
        value = getattr(config, option)
        if value != getattr(default, option):
            raise ConfigError(
                f"{name}.{option}={value!r} {what}, and this run collects none (it learns "
                "from a dataset): remove the option"
            )


__all__ = [
    "Agent",
    "CRRConfig",
    "MASKS_ACTIONS",
    "ConfigError",
    "DQNConfig",
    "NetworkConfig",
    "PPOConfig",
    "REGISTRY",
    "ReplayConfig",
    "SACConfig",
    "SVG0Config",
    "TD3Config",
    "UnknownAgentError",
    "config_class",
    "make",
    "register",
]
