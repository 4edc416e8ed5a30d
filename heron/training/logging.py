"""Run logs: metrics.jsonl (one JSON object a line), TensorBoard events, and progress."""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
import time
from typing import Any

import numpy as np

from heron.configs import ConfigError


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
        wandb: WandbSink | None = None,
        purge_step: int | None = None,
    ):
        """``summaries=False`` (Trax's should_write_summaries) writes neither file; the
        progress reports go on. ``wandb``: where the same scalars go to Weights & Biases
        (with or without the files). ``purge_step``: the first step a resumed run writes
        again: TensorBoard drops what the interrupted run wrote from there on (as
        metrics.jsonl was cut before it)."""
        self._run_dir = run_dir
        path = os.path.join(run_dir, "metrics.jsonl")
        self._file = open(path, "a", buffering=1) if summaries else None
        self._tb_dir = os.path.join(run_dir, "tb") if tensorboard and summaries else None
        self._per_seed = (configured_seeds(run_dir) if seeds is None else seeds) > 1
        self._writers: dict[str, Any] = {}
        self._purge_step = purge_step
        if self._tb_dir is not None and not self._per_seed:
            self._writer(None)
        self._progress = Progress(total_steps)
        self._wandb = wandb

    def _writer(self, seed):
        """The TensorBoard writer of ``seed`` (the run's one writer unless per seed)."""
        name = f"seed_{seed}" if self._per_seed and seed is not None else ""
        if name not in self._writers:
            from tensorboardX import SummaryWriter

            path = os.path.join(self._tb_dir, name)
            self._writers[name] = SummaryWriter(path, purge_step=self._purge_step)
        return self._writers[name]

    def write(self, record: dict) -> None:
        record = {key: _jsonable(value) for key, value in record.items()}
        if self._file is not None:
            try:
                self._file.write(json.dumps(record) + "\n")
            except OSError as error:  # a full disk: name the file
                raise OSError(error.errno, error.strerror, self._file.name) from error
        if record.get("kind") not in ("train", "eval"):
            return
        scalars = scalars_of(record)
        if self._wandb is not None:
            self._wandb.log(scalars, record["step"], record.get("seed") if self._per_seed else None)
        if self._tb_dir is None:
            return
        writer, step = self._writer(record.get("seed")), record["step"]
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, step)

    def video(self, frames, step: int, seed: int | None, fps: int = 30) -> str:
        """Writes an evaluation episode's frames [H, W, 3] as ``videos/step_<step>.gif``,
        shows it in TensorBoard (an animated image, tag ``eval/video``, as tensorboardX's
        add_video writes it) and logs it to Weights & Biases; returns the GIF's path."""
        from heron.video import gif_bytes

        os.makedirs(os.path.join(self._run_dir, "videos"), exist_ok=True)
        path = os.path.join(self._run_dir, "videos", f"step_{step:09d}.gif")
        data = gif_bytes(frames, fps)
        with open(path, "wb") as f:
            f.write(data)
        if self._tb_dir is not None:
            from tensorboardX.proto.summary_pb2 import Summary

            height, width = np.shape(frames[0])[:2]
            image = Summary.Image(
                height=height, width=width, colorspace=3, encoded_image_string=data
            )
            summary = Summary(value=[Summary.Value(tag="eval/video", image=image)])
            self._writer(seed)._get_file_writer().add_summary(summary, step)
        if self._wandb is not None:
            self._wandb.video(path, step, seed if self._per_seed else None)
        return path

    def progress(self, steps: int, steps_per_s: float, latest_return, greedy_return) -> None:
        self._progress.update(steps, steps_per_s, latest_return, greedy_return)

    def close(self) -> None:
        self._progress.close()
        if self._file is not None:
            self._file.close()
        for writer in self._writers.values():
            writer.close()
        if self._wandb is not None:
            self._wandb.close()


def scalars_of(record: dict) -> dict[str, float]:
    """The scalars of a train or eval line, by their TensorBoard tags: an evaluation's
    ``eval/return_mean/temperature_<t>``, a train line's numbers (``train/<name>`` for the
    names without a topic)."""
    if record["kind"] == "eval":
        value = record.get("return_mean")
        tag = f"eval/return_mean/temperature_{record['temperature']}"
        return {} if value is None else {tag: value}
    return {
        key if "/" in key else f"train/{key}": value
        for key, value in record.items()
        if key not in ("kind", "step", "seed") and isinstance(value, (int, float))
    }


class WandbSink:
    """A Weights & Biases run beside the TensorBoard events: the same scalars (a run of
    several seeds prefixes each seed's with ``seed_<k>/``) at the same env steps, and the
    run's config. Its id is kept in the run directory, so a resumed run goes on logging to
    the same Weights & Biases run. Files go to ``<run_dir>/wandb``."""

    ID_FILE = "wandb_id"

    def __init__(self, run_dir: str, project: str, config: dict):
        import wandb

        os.makedirs(os.path.join(run_dir, "wandb"), exist_ok=True)
        id_path = os.path.join(run_dir, "wandb", self.ID_FILE)
        if os.path.exists(id_path):
            with open(id_path) as f:
                run_id = f.read().strip()
        else:
            run_id = secrets.token_hex(6)
            with open(id_path, "w") as f:
                f.write(run_id)
        try:
            self._run = wandb.init(
                project=project,
                dir=run_dir,
                id=run_id,
                resume="allow",
                name=os.path.basename(os.path.abspath(run_dir)),
                config=config,
            )
        except Exception as error:  # no login, no network, a bad project name
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise ConfigError(
                f"wandb could not start the run ({type(error).__name__}: {message}); "
                "WANDB_MODE=offline logs without an account or network"
            ) from error
        self._run.define_metric("*", step_metric="env_steps")

    def log(self, scalars: dict[str, float], step: int, seed: int | None) -> None:
        prefix = "" if seed is None else f"seed_{seed}/"
        values = {prefix + tag: value for tag, value in scalars.items()}
        self._run.log({"env_steps": step, **values})

    def video(self, path: str, step: int, seed: int | None) -> None:
        import wandb

        prefix = "" if seed is None else f"seed_{seed}/"
        self._run.log({"env_steps": step, f"{prefix}eval/video": wandb.Video(path, format="gif")})

    def close(self) -> None:
        self._run.finish()


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
