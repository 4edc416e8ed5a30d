"""Controllers (Trax's ``controller``): at each evaluation a controller reads the run's
history (its metrics lines so far, one seed's) and returns multipliers for the agent's
scheduled hyperparameters (``{"learning_rate": 0.5}``); the values in effect are the
schedules' times the multipliers. A controller is any callable ``history -> dict``; the
command line names built-ins:

- ``plateau(NAME, FACTOR, PATIENCE)``: multiply NAME by FACTOR each time the greedy
  evaluation has not improved for PATIENCE evaluations (reduce-on-plateau).

Controllers are pure functions of the history, which a resumed run reads back from
metrics.jsonl, and the multipliers in effect are saved in the checkpoints: a resumed run
continues with exactly the values of the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from heron.configs import ConfigError

Controller = Callable[[list[dict]], dict]


@dataclasses.dataclass(frozen=True)
class Plateau:
    """Reduce-on-plateau: ``name`` times ``factor`` ** (the plateaus so far)."""

    name: str
    factor: float
    patience: int

    def __post_init__(self):
        if not 0 < self.factor < math.inf:
            raise ConfigError(f"plateau factor must be > 0, got {self.factor}")
        if self.patience < 1:
            raise ConfigError(f"plateau patience must be >= 1, got {self.patience}")

    def __call__(self, history: list[dict]) -> dict:
        evals = [r for r in history if r.get("kind") == "eval"]
        if not evals:
            return {self.name: 1.0}
        greedy = min(r["temperature"] for r in evals)
        best, since, plateaus = -math.inf, 0, 0
        for record in evals:
            value = record.get("return_mean")
            if record["temperature"] != greedy or value is None:
                continue
            if value > best:
                best, since = value, 0
            else:
                since += 1
                if since == self.patience:
                    plateaus, since = plateaus + 1, 0
        return {self.name: self.factor**plateaus}

    def __str__(self) -> str:
        return f"plateau({self.name}, {self.factor:g}, {self.patience})"


BUILT_IN = {"plateau": "plateau(NAME, FACTOR, PATIENCE)"}
_CALL = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$")


def parse_controller(text: str) -> Controller:
    """A built-in controller from its command-line form, e.g. ``plateau(learning_rate, 0.5, 3)``."""
    match = _CALL.match(text)
    forms = "; ".join(BUILT_IN.values())
    if not match or match[1] not in BUILT_IN:
        raise ConfigError(f"unknown controller {text!r}; built-ins: {forms}")
    args = [a.strip() for a in match[2].split(",")]
    try:
        name, factor, patience = args[0], float(args[1]), int(args[2])
        if len(args) != 3:
            raise ValueError
    except (ValueError, IndexError):
        raise ConfigError(f"controller {text!r}: expected {BUILT_IN[match[1]]}") from None
    return Plateau(name, factor, patience)  # checks the values' ranges


def check_names(values: dict, controllable: tuple[str, ...]) -> None:
    unknown = sorted(set(values) - set(controllable))
    if unknown:
        raise ConfigError(
            f"the controller sets {unknown}; this agent's controllable hyperparameters are "
            f"{', '.join(controllable)}"
        )
    bad = {k: v for k, v in values.items() if not (isinstance(v, int | float) and v >= 0)}
    if bad:
        raise ConfigError(f"the controller returned multipliers that are not numbers >= 0: {bad}")
