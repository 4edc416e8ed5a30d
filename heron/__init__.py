"""heron: reinforcement learning on JAX: one driver for on- and off-policy agents."""

__version__ = "0.1.0"

from heron import agents, envs, ops, replay, specs, types  # noqa: E402
from heron.types import Experience, StepType, TimeStep  # noqa: E402

__all__ = [
    "Experience",
    "StepType",
    "TimeStep",
    "agents",
    "envs",
    "ops",
    "replay",
    "specs",
    "types",
]
