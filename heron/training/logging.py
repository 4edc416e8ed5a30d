"""Run logs: metrics.jsonl (one JSON object a line), TensorBoard events, and progress."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLogger:
    """Writes metrics.jsonl and TensorBoard scalars; reports progress on stderr."""

    def __init__(self, run_dir: str, total_steps: int, tensorboard: bool = True):
        self._file = open(os.path.join(run_dir, "metrics.jsonl"), "a", buffering=1)
        self._writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(os.path.join(run_dir, "tb"))
        self._progress = Progress(total_steps)

    def write(self, record: dict) -> None:
        record = {key: _jsonable(value) for key, value in record.items()}
        self._file.write(json.dumps(record) + "\n")
        if self._writer is None:
            return
        step = record["step"]
        if record.get("kind") == "eval":
            tag = f"eval/return_mean/temperature_{record['temperature']}"
            if record.get("return_mean") is not None:
                self._writer.add_scalar(tag, record["return_mean"], step)
            return
        for key, value in record.items():
            if key not in ("kind", "step", "seed") and isinstance(value, (int, float)):
                self._writer.add_scalar(key if "/" in key else f"train/{key}", value, step)

    def progress(self, steps: int, steps_per_s: float, latest_return, greedy_return) -> None:
        self._progress.update(steps, steps_per_s, latest_return, greedy_return)

    def close(self) -> None:
        self._progress.close()
        self._file.close()
        if self._writer is not None:
            self._writer.close()


class Progress:
    """A rich progress bar on a terminal; plain lines (at most one every 2 s) otherwise."""

    def __init__(self, total_steps: int):
        self._total = total_steps
        self._last_line = 0.0
        self._bar = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]train"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} steps"),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._bar.add_task("train", total=total_steps, info="")
            self._bar.start()

    @staticmethod
    def _format(value) -> str:
        return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"

    def update(self, steps, steps_per_s, latest_return, greedy_return) -> None:
        info = (
            f"{steps_per_s:,.0f} steps/s  return {self._format(latest_return)}"
            f"  eval {self._format(greedy_return)}"
        )
        if self._bar is not None:
            self._bar.update(self._task, completed=steps, info=info)
            return
        now = time.monotonic()
        if now - self._last_line >= 2.0 or steps >= self._total:
            self._last_line = now
            print(f"[heron] {steps:,}/{self._total:,} steps  {info}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
