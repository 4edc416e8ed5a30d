"""Run logs: metrics.jsonl (one JSON object a line), TensorBoard events, and progress."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

import numpy as np


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLogger:
    """Writes metrics.jsonl and TensorBoard scalars; reports progress on stderr.

    TensorBoard events go to ``tb/``; a run of several seeds writes each seed's to
    ``tb/seed_<k>/`` with the same tags, so TensorBoard draws one curve per seed (one writer
    for all would interleave the seeds into one zig-zag curve). ``seeds`` is the run's number
    of seeds (default: config.json's ``run.seeds``, else 1).
    """

    def __init__(
        self,
        run_dir: str,
        total_steps: int,
        tensorboard: bool = True,
        seeds: int | None = None,
        summaries: bool = True,
    ):
        """``summaries=False`` (Trax's should_write_summaries) writes neither file; the
        progress reports go on."""
        path = os.path.join(run_dir, "metrics.jsonl")
        self._file = open(path, "a", buffering=1) if summaries else None
        self._tb_dir = os.path.join(run_dir, "tb") if tensorboard and summaries else None
        self._per_seed = (configured_seeds(run_dir) if seeds is None else seeds) > 1
        self._writers: dict[str, Any] = {}
        if self._tb_dir is not None and not self._per_seed:
            self._writer(None)
        self._progress = Progress(total_steps)

    def _writer(self, seed):
        """The TensorBoard writer of ``seed`` (the run's one writer unless per seed)."""
        name = f"seed_{seed}" if self._per_seed and seed is not None else ""
        if name not in self._writers:
            from tensorboardX import SummaryWriter

            self._writers[name] = SummaryWriter(os.path.join(self._tb_dir, name))
        return self._writers[name]

    def write(self, record: dict) -> None:
        if self._file is None:
            return
        record = {key: _jsonable(value) for key, value in record.items()}
        try:
            self._file.write(json.dumps(record) + "\n")
        except OSError as error:  # a full disk: name the file
            raise OSError(error.errno, error.strerror, self._file.name) from error
        if self._tb_dir is None or record.get("kind") not in ("train", "eval"):
            return
        writer, step = self._writer(record.get("seed")), record["step"]
        if record["kind"] == "eval":
            tag = f"eval/return_mean/temperature_{record['temperature']}"
            if record.get("return_mean") is not None:
                writer.add_scalar(tag, record["return_mean"], step)
            return
        for key, value in record.items():
            if key not in ("kind", "step", "seed") and isinstance(value, (int, float)):
                writer.add_scalar(key if "/" in key else f"train/{key}", value, step)

    def progress(self, steps: int, steps_per_s: float, latest_return, greedy_return) -> None:
        self._progress.update(steps, steps_per_s, latest_return, greedy_return)

    def close(self) -> None:
        self._progress.close()
        if self._file is not None:
            self._file.close()
        for writer in self._writers.values():
            writer.close()


def configured_seeds(run_dir: str) -> int:
    """``run.seeds`` of ``run_dir``'s config.json; 1 when it has none (or is unreadable)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            seeds = json.load(f)["run"]["seeds"]
    except (OSError, ValueError, KeyError, TypeError):
        return 1
    return seeds if isinstance(seeds, int) and seeds >= 1 else 1


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
