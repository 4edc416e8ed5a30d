"""heron: reinforcement learning on JAX: one driver for on- and off-policy agents.

Submodules load on first use, so light commands (``heron plot``) do not import JAX.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "agents",
    "envs",
    "networks",
    "ops",
    "replay",
    "schedules",
    "specs",
    "training",
    "types",
)
_TYPES = ("Experience", "StepType", "TimeStep")

__all__ = [*_TYPES, *_SUBMODULES]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"heron.{name}")
    if name in _TYPES:
        return getattr(importlib.import_module("heron.types"), name)
    raise AttributeError(f"module 'heron' has no attribute {name!r}")
