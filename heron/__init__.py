"""heron: reinforcement learning on JAX: one driver for on- and off-policy agents.

    import heron
    setup = heron.build("ppo", run=heron.RunConfig(env="gymnax:CartPole-v1", steps=50_000))
    summary = heron.train(setup, "runs/example")

Submodules load on first use, so light commands (``heron plot``) do not import JAX.
"""

import importlib
import time

__version__ = "0.1.0"
IMPORTED_AT = time.time()  # heron's code running is its files as they were before this

_SUBMODULES = (
    "agents",
    "api",
    "configs",
    "envs",
    "networks",
    "offline",
    "ops",
    "policy",
    "presets",
    "replay",
    "schedules",
    "specs",
    "training",
    "types",
)
_TYPES = ("Experience", "StepType", "TimeStep")
_API = (
    "build",
    "collect",
    "evaluate_run",
    "load_config",
    "load_run",
    "resume",
    "train",
)

_POLICY = ("Policy", "load")

__all__ = [*_TYPES, *_API, *_POLICY, "RunConfig", *_SUBMODULES]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"heron.{name}")
    if name in _TYPES:
        return getattr(importlib.import_module("heron.types"), name)
    if name in _API:
        return getattr(importlib.import_module("heron.api"), name)
    if name in _POLICY:
        return getattr(importlib.import_module("heron.policy"), name)
    if name == "RunConfig":
        return importlib.import_module("heron.run_config").RunConfig
    raise AttributeError(f"module 'heron' has no attribute {name!r}")
