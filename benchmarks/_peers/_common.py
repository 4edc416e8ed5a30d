"""Helpers shared by the peer benchmark scripts.

The peer scripts run inside their own virtual environments (see
``benchmarks/ppo_cartpole.py``), so this module uses the standard library only.
Each peer script prints exactly one JSON object as its last stdout line; the
orchestrator parses that line.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any


def base_parser(description: str, modes: Iterable[str]) -> argparse.ArgumentParser:
    """Return the command-line parser common to all peer scripts."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--mode", choices=list(modes), required=True)
    parser.add_argument("--steps", type=int, required=True, help="env steps to train")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-every", type=int, default=5_000, help="env steps between greedy evaluations"
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=8, help="episodes per greedy evaluation"
    )
    parser.add_argument(
        "--solved-return", type=float, default=475.0, help="greedy mean return counted as solved"
    )
    return parser


def equal_work_ppo_parser(description: str) -> argparse.ArgumentParser:
    """The PPO settings benchmarks/jax_physics.py hands each peer trainer (brax_ppo.py,
    rejax_brax_ppo.py), translated from heron's preset."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--env", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--unroll-length", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="sequences a mini-batch")
    parser.add_argument("--num-minibatches", type=int, required=True)
    parser.add_argument("--num-epochs", type=int, required=True)
    parser.add_argument("--discount", type=float, required=True)
    parser.add_argument("--gae-lambda", type=float, required=True)
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--entropy-cost", type=float, required=True)
    parser.add_argument("--clip-range", type=float, required=True)
    parser.add_argument("--reward-scale", type=float, required=True)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", required=True)
    parser.add_argument("--activation", required=True)
    parser.add_argument("--num-evals", type=int, required=True, help="the first at step 0")
    parser.add_argument("--eval-episodes", type=int, required=True)
    return parser


def package_versions(*names: str) -> dict[str, str | None]:
    """Installed versions of ``names`` (None for a package that is missing)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def first_step_reaching(evals: list[dict[str, Any]], threshold: float) -> int | None:
    """Smallest ``step`` of an evaluation whose ``return_mean`` is at least ``threshold``."""
    steps = [e["step"] for e in evals if e["return_mean"] >= threshold]
    return min(steps) if steps else None


def emit(payload: dict[str, Any]) -> None:
    """Print ``payload`` as the final JSON line of stdout."""
    sys.stdout.flush()
    print(json.dumps(payload), flush=True)
