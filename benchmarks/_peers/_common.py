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
