"""Pendulum-v1: heron SAC, CRR and SVG0 against Stable-Baselines3 SAC and SBX SAC, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/pendulum.py [--quick] [--only NAMES] [--out PATH] [--wait-idle S]

Every measurement is a fresh subprocess, so whole-process times include
interpreter start-up, imports and (for heron) JAX compilation on an empty
compilation cache:

* SB3 SAC (torch CPU, one torch thread, 1 env, train_freq 1, gradient_steps 1,
  so one update per env step) with rl-baselines3-zoo's Pendulum-v1
  hyperparameters, in ``benchmarks/.venvs/sb3`` via ``_peers/sb3_sac.py``;
* heron CRR through its CLI (``heron train crr``, 32 envs x unroll 1 per
  iteration, ``--reward-scale 0.1``): gymnax Pendulum-v1 at replay ratio 1.0
  (the same update-to-data ratio as SAC) with Acme's networks and with small ones
  (``SMALL_CRR_FLAGS``), at heron's default 0.25, and gym Pendulum-v1 at replay ratio 1.0;
* SBX SAC (``sbx-rl``, JAX; the same zoo hyperparameters, one env, one update per env
  step) in its own ``benchmarks/.venvs/sbx`` via ``_peers/sbx_sac.py``;
* heron SAC through its CLI (``heron train sac``) with its gymnax Pendulum-v1 preset
  (heron/presets/sac.toml: 16 envs, 64x64 networks, batches of 128, lr 1e-3) at the same
  update-to-data ratio, 1. SB3, SBX and heron SAC run ``--sac-seeds`` seeds (default 3),
  one process each, and the script prints each system's mean steps/s, whole-process time
  and return against env steps, and the ratios against ``SAC_TARGETS``;
* heron SVG0 through its CLI (``heron train svg0``, same 32 envs and reward scale),
  without and with the learned prior (``--svg0.prior True``), on gymnax Pendulum-v1 at
  replay ratio 0.5 with the settings of its learning test (``SVG0_FLAGS``: 64 x 64
  networks, mini-batches of 32 sequences of 10 steps = 288 transitions, learning rates
  3e-4; Acme's defaults otherwise).

Both evaluate greedily (heron: temperature 0; SB3: deterministic) every
``EVAL_EVERY`` env steps over ``EVAL_EPISODES`` episodes, and at the end.
The script prints a table, the eval curves (return against env steps and
against wall time), and heron's steps/s over SB3's at the same UTD (target
``SPEEDUP_TARGET``). ``--quick`` shortens every run. Timings are reported, never
asserted; a failing process has its stderr tail printed and the rest goes on.
``--only`` runs a subset of the runs by name (e.g. ``--only heron_svg0,heron_svg0_prior``).
Results go to ``--out`` as JSON (default ``benchmarks/results/pendulum.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _harness import SetupError
from _peers._common import first_step_reaching
from ppo_cartpole import (
    BUSY_WARNING,
    log,
    machine_info,
    measure,
    other_load,
    prepare_peer,
    ratio,
    record_run,
    reset_dir,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"

HERON_ENVS_PER_ITERATION = 32  # heron's default --num-envs x --crr/svg0.unroll-length
REWARD_SCALE = 0.1  # what heron's learner sees; eval returns stay unscaled
EVAL_EVERY = 2_048  # env steps between greedy evaluations (64 heron iterations)
EVAL_EPISODES = 8
THRESHOLD_RETURN = -200.0  # "steps to >= -200": a usual bar for a swung-up pendulum
SPEEDUP_TARGET = 5.0  # heron steps/s / SB3 steps/s at the same UTD
# heron SAC's targets (issue 11): steps/s >= 5x SB3 SAC's and >= SBX SAC's at the same UTD,
# and a return at 20k steps at least theirs.
SAC_TARGETS = {"sb3_sac": 5.0, "sbx_sac": 1.0}
SAC_STEPS, QUICK_SAC_STEPS = 20_000, 4_000  # SBX and heron SAC (SB3: the first FULL_STEPS)
HERON_SAC_ENVS = 16  # the preset's num_envs (heron/presets/sac.toml)
SAC_SYSTEMS = ("sb3_sac", "sbx_sac", "heron_sac")
# Env steps of the full runs: SB3 SAC (the zoo's n_timesteps), heron CRR gymnax at UTD 1,
# the same with small CRR networks, heron CRR gymnax at its default UTD 0.25, heron CRR gym
# at UTD 1 (short: ~70 steps/s on 2 cores), heron SVG0 gymnax at UTD 0.5 without and with
# its prior.
FULL_STEPS = (20_000, 20_000, 20_000, 60_000, 8_000, 30_000, 30_000)
QUICK_STEPS = (4_000, 4_000, 4_000, 12_000, 4_000, 6_000, 6_000)
SVG0_UTD = 0.5
# SVG0's settings here, those of its learning test (tests/test_svg0.py), Acme's otherwise.
SVG0_FLAGS = (
    "--svg0.network.hidden-sizes", "64", "64", "--svg0.batch-size", "32",
    "--svg0.policy-learning-rate", "3e-4", "--svg0.critic-learning-rate", "3e-4",
    "--svg0.prior-learning-rate", "3e-4",
)  # fmt: skip
# CRR with a tenth of the default learner's arithmetic (benchmarks/crr_update.py): 64 x 64
# networks and one action sample for the baseline and for the TD target instead of 4 + 4.
SMALL_CRR_FLAGS = (
    "--crr.network.hidden-sizes", "64", "64",
    "--crr.num-action-samples-policy", "1", "--crr.num-action-samples-td", "1",
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One planned measurement process."""

    name: str
    system: str  # "sb3", "sbx" or "heron"
    env: str
    utd: float  # gradient updates per env step
    steps: int
    algo: str = "crr"  # heron's algorithm
    prior: bool = False  # SVG0's learned prior
    flags: tuple[str, ...] = ()  # further heron flags
    seed: int | None = None  # None: --seed


def plan(quick: bool, only: tuple[str, ...] = (), sac_seeds: tuple[int, ...] = (0,)) -> list[Run]:
    """The runs, in execution order (about 20 min in all on 2 idle cores; --quick about 7),
    or those named in ``only``.

    --quick keeps every heron run above the 2,000 steps heron's CRR stores before
    its first update.
    """
    sac, utd1, small, default_utd, gym, svg0, svg0_prior = QUICK_STEPS if quick else FULL_STEPS
    gymnax = "gymnax:Pendulum-v1"
    sac_steps = QUICK_SAC_STEPS if quick else SAC_STEPS
    runs = [
        run
        for seed in sac_seeds
        for run in (
            Run("sb3_sac", "sb3", "gymnasium:Pendulum-v1", 1.0, sac, seed=seed),
            Run("sbx_sac", "sbx", "gymnasium:Pendulum-v1", 1.0, sac_steps, seed=seed),
            Run("heron_sac", "heron", gymnax, 1.0, sac_steps, algo="sac", seed=seed),
        )
    ]
    runs += [
        Run("heron_gymnax_utd1", "heron", gymnax, 1.0, utd1),
        Run("heron_gymnax_utd1_small", "heron", gymnax, 1.0, small, flags=SMALL_CRR_FLAGS),
        Run("heron_gymnax_utd0.25", "heron", gymnax, 0.25, default_utd),
        Run("heron_gym_utd1", "heron", "gym:Pendulum-v1", 1.0, gym),
        Run("heron_svg0", "heron", gymnax, SVG0_UTD, svg0, algo="svg0"),
        Run("heron_svg0_prior", "heron", gymnax, SVG0_UTD, svg0_prior, algo="svg0", prior=True),
    ]
    unknown = set(only) - {run.name for run in runs}
    if unknown:
        names = ", ".join(run.name for run in runs)
        raise SystemExit(f"--only: unknown run(s) {', '.join(sorted(unknown))}; runs: {names}")
    return [run for run in runs if not only or run.name in only]


def system_name(run: Run) -> str:
    if run.system == "sb3":
        return "SB3 SAC"
    if run.system == "sbx":
        return "SBX SAC"
    if run.algo == "sac":
        return "heron SAC"
    if run.algo == "svg0":
        return "heron SVG0+prior" if run.prior else "heron SVG0"
    return "heron CRR (small)" if run.flags == SMALL_CRR_FLAGS else "heron CRR"


@dataclass
class Row:
    """One row of the results table, with its eval curve."""

    name: str
    system: str
    env: str
    utd: float
    seed: int | None = None
    status: str = "ok"  # ok | failed | skipped
    steps: int | None = None
    updates: int | None = None
    whole_s: float | None = None
    steps_per_s: float | None = None
    final_return: float | None = None
    best_return: float | None = None
    steps_to_threshold: int | None = None
    disturbed: bool = False
    reason: str | None = None
    # heron: median s per iteration {"filling": replay filling, "learning": with updates}
    iteration_s: dict[str, float | None] | None = None
    # {"step", "wall_s" (since process start), "return_mean", "return_std"}
    curve: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.system if self.seed is None else f"{self.system} s{self.seed}"

    @property
    def updates_per_step(self) -> float | None:
        if self.updates is None or not self.steps:
            return None
        return self.updates / self.steps


# --------------------------------------------------------------------------- SB3


def bench_sb3(run: Run, args) -> tuple[Row, dict[str, Any]]:
    """Run SB3 (or SBX) SAC once with periodic evaluation."""
    seed = args.seed if run.seed is None else run.seed
    row = Row(run.name, system_name(run), run.env, run.utd, seed)
    try:
        python = prepare_peer(run.system)
    except SetupError as exc:
        log(f"  skipped: could not prepare its venv: {exc}")
        row.status, row.reason = "skipped", f"venv setup failed: {exc}"
        return row, {}
    argv = [
        str(python), str(PEERS / f"{run.system}_sac.py"), "--mode", "eval",
        "--steps", str(run.steps), "--seed", str(seed), "--eval-every", str(EVAL_EVERY),
        "--eval-episodes", str(EVAL_EPISODES), "--solved-return", str(THRESHOLD_RETURN),
    ]  # fmt: skip
    runs: dict[str, Any] = {}
    label = f"{system_name(run)} {run.steps:,} steps, seed {seed}"
    payload = record_run(runs, run.name, label, measure(argv, args))
    record = runs[run.name]
    row.disturbed = other_load(record) > BUSY_WARNING
    if payload is None:
        row.status, row.reason = "failed", record.get("error")
        return row, record
    row.steps, row.updates = payload["steps"], payload["updates"]
    row.whole_s = record["wall_s"]
    row.steps_per_s = payload["steps_per_s_excluding_eval"]
    row.final_return, row.best_return = payload["final_eval_return"], payload["best_eval_return"]
    row.curve = [
        {key: e[key] for key in ("step", "wall_s", "return_mean", "return_std")}
        for e in payload["evals"]
    ]
    row.steps_to_threshold = first_step_reaching(row.curve, THRESHOLD_RETURN)
    return row, record


# --------------------------------------------------------------------------- heron


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All JSON lines of a heron ``metrics.jsonl`` (unparsable lines skipped)."""
    entries = []
    with open(path) as lines:
        for line in lines:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return entries


def heron_curve(entries: list[dict[str, Any]], startup_s: float) -> list[dict[str, Any]]:
    """Greedy eval points; ``wall_s`` moved from heron's loop clock to process start.

    heron's ``wall_s`` starts with its training loop, after imports and setup;
    ``startup_s`` (whole-process time minus the loop's) is added so both systems'
    curves count from process start. It includes process teardown, so the
    shift is an upper bound by a second or so.
    """
    return [
        {
            "step": e["step"],
            "wall_s": e["wall_s"] + startup_s,
            "loop_wall_s": e["wall_s"],
            "return_mean": e["return_mean"],
            "return_std": e["return_std"],
        }
        for e in entries
        if e.get("kind") == "eval" and e.get("temperature") == 0.0
    ]


def heron_updates(entries: list[dict[str, Any]]) -> int | None:
    """Gradient updates of the run: ``train/updates`` summed over its train lines (each
    line sums those of the iterations since the one before).

    None unless the lines' iterations increase (a resumed run's may repeat some).
    """
    train = [e for e in entries if e.get("kind") == "train"]
    iterations = [e.get("iteration") for e in train]
    if not train or any(i is None for i in iterations) or iterations != sorted(set(iterations)):
        return None
    return int(sum(e.get("train/updates", 0.0) for e in train))


def heron_iteration_s(entries: list[dict[str, Any]]) -> dict[str, float | None]:
    """Median seconds per iteration before the first update (replay filling) and after.

    From consecutive train lines (each after one call of several iterations), leaving out
    the first call (compilation) and those following an evaluation. Equal figures mean the
    warm-up iterations cost as much as learning ones.
    """
    train = [e for e in entries if e.get("kind") == "train"]
    eval_steps = {e["step"] for e in entries if e.get("kind") == "eval"}
    filling, learning = [], []
    for before, after in itertools.pairwise(train):
        if before["step"] in eval_steps:
            continue
        seconds = (after["wall_s"] - before["wall_s"]) / (after["iteration"] - before["iteration"])
        (learning if after.get("train/updates", 0.0) > 0 else filling).append(seconds)
    return {
        "filling": statistics.median(filling) if filling else None,
        "learning": statistics.median(learning) if learning else None,
    }


def heron_argv(run: Run, args, run_dir: Path) -> list[str]:
    """The ``heron train crr|svg0|sac`` command line of ``run``."""
    seed = args.seed if run.seed is None else run.seed
    if run.algo == "sac":  # its preset, at the run's update-to-data ratio
        return [
            str(args.heron), "train", "sac", "--env", run.env, "--steps", str(run.steps),
            "--seed", str(seed), "--run-dir", str(run_dir), "--num-envs", str(HERON_SAC_ENVS),
            "--eval-every-n", str(max(1, round(EVAL_EVERY / HERON_SAC_ENVS))),
            "--n-evals", str(EVAL_EPISODES), "--eval-temperatures", "0",
            "--sac.replay.ratio", str(run.utd), *run.flags,
        ]  # fmt: skip
    eval_every_n = max(1, round(EVAL_EVERY / HERON_ENVS_PER_ITERATION))
    agent_flags = [f"--{run.algo}.replay.ratio", str(run.utd)]
    if run.algo == "svg0":
        agent_flags += [*SVG0_FLAGS, "--svg0.prior", str(run.prior)]
    agent_flags += run.flags
    return [  # heron's defaults, not the Pendulum preset, plus the run's flags
        str(args.heron), "train", run.algo, "--env", run.env, "--preset", "none",
        "--steps", str(run.steps), "--seed", str(args.seed), "--run-dir", str(run_dir),
        "--reward-scale", str(REWARD_SCALE), "--eval-every-n", str(eval_every_n),
        "--n-evals", str(EVAL_EPISODES), "--eval-temperatures", "0", *agent_flags,
    ]  # fmt: skip


def bench_heron(run: Run, args) -> tuple[Row, dict[str, Any]]:
    """Run ``heron train crr|svg0|sac`` once, on an empty compilation cache."""
    row = Row(run.name, system_name(run), run.env, run.utd, run.seed)
    work = args.out.parent / "heron_runs"
    run_dir = work / f"pendulum_{run.name}{'' if run.seed is None else f'_s{run.seed}'}"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # heron creates its run dir itself
    cache = reset_dir(work / f"pendulum_{run.name}.jax-cache")
    child = measure(heron_argv(run, args, run_dir), args, env={"HERON_COMPILE_CACHE": str(cache)})
    runs: dict[str, Any] = {}
    label = f"{system_name(run)} {run.env.split(':')[0]} UTD {run.utd:g}, {run.steps:,} steps"
    label += "" if run.seed is None else f", seed {run.seed}"
    payload = record_run(runs, run.name, label, child)
    record = runs[run.name]
    row.disturbed = other_load(record) > BUSY_WARNING
    if payload is None:
        row.status, row.reason = "failed", record.get("error")
        return row, record
    row.steps, row.whole_s = payload["steps"], record["wall_s"]
    row.steps_per_s = payload.get("steps_per_s_after_compile")
    row.final_return = payload.get("final_eval_return")
    row.best_return = payload.get("best_eval_return")
    metrics = Path(payload.get("run_dir") or run_dir) / "metrics.jsonl"
    if metrics.exists():
        entries = read_metrics(metrics)
        row.curve = heron_curve(entries, startup_s=max(0.0, row.whole_s - payload["wall_s"]))
        row.updates = heron_updates(entries)
        row.iteration_s = heron_iteration_s(entries)
        row.steps_to_threshold = first_step_reaching(row.curve, THRESHOLD_RETURN)
    else:
        record["note"] = f"{metrics} not found"
    return row, record


# --------------------------------------------------------------------------- report


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[Row]) -> str:
    """Fixed-width results table."""
    header = (
        "system", "env", "UTD", "status", "steps", "updates/step", "whole-process s",
        "steps/s", "eval return (end)", "best", f"steps to >={THRESHOLD_RETURN:g}",
    )  # fmt: skip
    body = [
        (
            r.label,
            r.env,
            f"{r.utd:g}",
            r.status + ("*" if r.disturbed else ""),
            fmt(r.steps, ","),
            fmt(r.updates_per_step, ".3f"),
            fmt(r.whole_s, ".1f"),
            fmt(r.steps_per_s, ",.0f"),
            fmt(r.final_return, ".1f"),
            fmt(r.best_return, ".1f"),
            fmt(r.steps_to_threshold, ",") if r.status == "ok" else "-",
        )
        for r in rows
    ]
    return align([header, *body], numeric_from=4)


def align(table: list[tuple[str, ...]], numeric_from: int) -> str:
    """Columns padded to width; columns from ``numeric_from`` on right-aligned."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if i >= numeric_from else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(table[0]), rule, *(line(row) for row in table[1:])])


def format_curves(rows: list[Row]) -> str:
    """Eval curves side by side, one column per run: "return @ wall s", by env step."""
    shown = [r for r in rows if r.curve]
    if not shown:
        return "eval curves: none"
    points = [{p["step"]: p for p in r.curve} for r in shown]
    steps = sorted({step for by_step in points for step in by_step})
    header = ("step", *(f"{r.label} {r.env.split(':')[0]} UTD {r.utd:g}" for r in shown))
    body = []
    for step in steps:
        cells = []
        for by_step in points:
            p = by_step.get(step)
            cells.append(f"{p['return_mean']:8.1f} @ {p['wall_s']:6.1f} s" if p else "")
        body.append((f"{step:,}", *cells))
    title = "eval curves (greedy mean return @ seconds since process start), by env step:"
    return title + "\n" + align([header, *body], numeric_from=0)


def format_iteration_times(rows: list[Row]) -> str:
    """heron's median seconds per iteration while filling the replay and while learning."""
    lines = ["heron median s per iteration (32 env steps; SAC 16): replay filling / learning:"]
    for r in rows:
        if r.iteration_s:
            filling, learning = r.iteration_s["filling"], r.iteration_s["learning"]
            lines.append(
                f"  {r.label:<16} {r.env.split(':')[0]:<6} UTD {r.utd:<4g}  "
                f"{fmt(filling, '.3f')} / {fmt(learning, '.3f')}"
            )
    return "\n".join(lines)


def find(rows: list[Row], name: str) -> Row | None:
    return next((r for r in rows if r.name == name and r.status == "ok"), None)


def mean_of(rows: list[Row], name: str, attribute: str) -> float | None:
    """The mean of ``attribute`` over the finished runs (every seed) of ``name``."""
    values = [getattr(r, attribute) for r in rows if r.name == name and r.status == "ok"]
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def compute_ratios(rows: list[Row]) -> dict[str, float | None]:
    """heron steps/s over SB3 steps/s (None where a side is missing); SB3's over its seeds."""
    base = mean_of(rows, "sb3_sac", "steps_per_s")
    ratios = {}
    for name in (
        "heron_gymnax_utd1",
        "heron_gymnax_utd1_small",
        "heron_gym_utd1",
        "heron_gymnax_utd0.25",
        "heron_svg0",
        "heron_svg0_prior",
    ):
        heron = find(rows, name)
        ratios[f"{name}_over_sb3_steps_per_s"] = ratio(heron.steps_per_s if heron else None, base)
    heron_sac = mean_of(rows, "heron_sac", "steps_per_s")
    for peer in SAC_TARGETS:
        peer_rate = mean_of(rows, peer, "steps_per_s")
        ratios[f"heron_sac_over_{peer}_steps_per_s"] = ratio(heron_sac, peer_rate)
    return ratios


def sac_summary(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Per SAC system: seeds run, mean steps/s, mean whole-process s, final (20k) return per
    seed and their mean, mean steps to the threshold, and the mean curve by env step."""
    summary = {}
    for name in SAC_SYSTEMS:
        done = [r for r in rows if r.name == name and r.status == "ok"]
        if not done:
            continue
        by_step: dict[int, list[float]] = {}
        for r in done:
            for p in r.curve:
                by_step.setdefault(p["step"], []).append(p["return_mean"])
        finals = [r.final_return for r in done if r.final_return is not None]
        summary[name] = {
            "system": done[0].system,
            "seeds": [r.seed for r in done],
            "steps": [r.steps for r in done],
            "steps_per_s": mean_of(rows, name, "steps_per_s"),
            "whole_s": mean_of(rows, name, "whole_s"),
            "final_returns": finals,
            "final_return_mean": statistics.fmean(finals) if finals else None,
            "steps_to_threshold": [r.steps_to_threshold for r in done],
            "curve": {step: statistics.fmean(v) for step, v in sorted(by_step.items())},
        }
    return summary


def format_sac(summary: dict[str, dict[str, Any]], ratios: dict[str, float | None]) -> str:
    """The SAC comparison: each system over its seeds, its mean curve, and the targets."""
    if not summary:
        return "SAC comparison: no SAC run finished"
    header = ("system", "seeds", "steps/s", "whole-process s", "return at end (per seed)",
              "mean", f"steps to >={THRESHOLD_RETURN:g}")  # fmt: skip
    body = [
        (
            s["system"],
            ",".join(map(str, s["seeds"])),
            fmt(s["steps_per_s"], ",.0f"),
            fmt(s["whole_s"], ".1f"),
            " ".join(f"{v:.1f}" for v in s["final_returns"]),
            fmt(s["final_return_mean"], ".1f"),
            " ".join("-" if v is None else f"{v:,}" for v in s["steps_to_threshold"]),
        )
        for s in summary.values()
    ]
    lines = ["SAC on Pendulum-v1 at one update per env step (means over seeds):"]
    lines.append(align([header, *body], numeric_from=2))
    steps = sorted({step for s in summary.values() for step in s["curve"]})
    curve_header = ("step", *(s["system"] for s in summary.values()))
    curve_body = [
        (f"{step:,}", *(fmt(s["curve"].get(step), ".1f") for s in summary.values()))
        for step in steps
    ]
    lines += ["", "mean greedy return by env step:", align([curve_header, *curve_body], 0), ""]
    heron = summary.get("heron_sac")
    for peer, target in SAC_TARGETS.items():
        value = ratios.get(f"heron_sac_over_{peer}_steps_per_s")
        verdict = "n/a" if value is None else ("met" if value >= target else "NOT met")
        shown = "n/a" if value is None else f"{value:.2f}x"
        lines.append(
            f"heron SAC steps/s / {peer.split('_')[0].upper()} SAC steps/s: {shown}"
            f"   target >= {target:g}x: {verdict}"
        )
        other = summary.get(peer)
        if heron and other and None not in (heron["final_return_mean"], other["final_return_mean"]):
            better = heron["final_return_mean"] >= other["final_return_mean"]
            lines.append(
                f"  return at the end: heron {heron['final_return_mean']:.1f} vs "
                f"{other['final_return_mean']:.1f}: {'equal or better' if better else 'WORSE'}"
            )
    return "\n".join(lines)


def format_ratios(ratios: dict[str, float | None]) -> str:
    def show(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}x"

    same_utd = ratios["heron_gymnax_utd1_over_sb3_steps_per_s"]
    verdict = "n/a"
    if same_utd is not None:
        verdict = "met" if same_utd >= SPEEDUP_TARGET else "NOT met"
    return "\n".join(
        [
            "throughput, heron steps/s / SB3 SAC steps/s:",
            f"  heron gymnax, UTD 1 (same UTD as SAC)   {show(same_utd)}"
            f"   target >= {SPEEDUP_TARGET:g}x: {verdict}",
            f"  heron gymnax, UTD 1, small CRR          "
            f"{show(ratios['heron_gymnax_utd1_small_over_sb3_steps_per_s'])}"
            f"   (64x64 networks, 1+1 action samples)",
            f"  heron gym,    UTD 1 (same UTD as SAC)   "
            f"{show(ratios['heron_gym_utd1_over_sb3_steps_per_s'])}",
            f"  heron gymnax, UTD 0.25 (heron default)  "
            f"{show(ratios['heron_gymnax_utd0.25_over_sb3_steps_per_s'])}   (not the same UTD)",
            f"  {f'heron SVG0 gymnax, UTD {SVG0_UTD:g}':<40}"
            f"{show(ratios['heron_svg0_over_sb3_steps_per_s'])}   (not the same UTD)",
            f"  {f'heron SVG0+prior gymnax, UTD {SVG0_UTD:g}':<40}"
            f"{show(ratios['heron_svg0_prior_over_sb3_steps_per_s'])}   (not the same UTD)",
        ]
    )


NOTES = f"""\
notes:
  UTD            requested gradient updates per env step; updates/step is what the run did
                 (heron: train/updates summed over metrics.jsonl; CRR's first 2,000 steps
                 SVG0's and heron SAC's first 1,000 fill the replay without updates; SB3
                 and SBX: model._n_updates, learning_starts 100). SB3/SBX SAC and CRR use
                 batches of 256 transitions, heron SAC 128 (its preset), SVG0 32 sequences
                 of 10 steps (288 transitions).
  whole-process  wall clock of a fresh process: start-up, imports, compilation (heron, on an
                 empty cache), training and evaluation.
  steps/s        SB3: steps / (learn() time - evaluation time); heron:
                 steps_per_s_after_compile (training iterations after the first, no evals).
  eval           greedy, every {EVAL_EVERY:,} env steps and at the end, {EVAL_EPISODES} episodes,
                 unscaled returns. Curve times count from process start (heron's loop clock
                 shifted by its start-up time, see heron_curve).
  *              other processes loaded the CPUs during that run; its timings are disturbed.
  one seed (SAC: --sac-seeds); single measurements on this machine."""


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every run 5x shorter")
    parser.add_argument(
        "--out", type=Path, default=BENCH / "results" / "pendulum.json", help="results JSON path"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sac-seeds",
        type=int,
        default=3,
        help="seeds of the SAC comparison (SB3, SBX, heron), from --seed on",
    )
    parser.add_argument(
        "--only",
        default="",
        metavar="NAMES",
        help="comma-separated run names to do (default all), e.g. heron_svg0,heron_svg0_prior",
    )
    parser.add_argument("--heron", default=str(ROOT / ".venv" / "bin" / "heron"), help="heron CLI")
    parser.add_argument(
        "--timeout", type=float, default=1200.0, help="seconds allowed per measurement process"
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each measurement, wait up to this long for other CPU load to go away",
    )
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    mode = "quick" if args.quick else "full"
    only = tuple(name for name in args.only.split(",") if name)
    sac_seeds = tuple(range(args.seed, args.seed + args.sac_seeds))
    runs = plan(args.quick, only, sac_seeds)
    log(f"Pendulum-v1: heron SAC, CRR and SVG0 vs SB3 and SBX SAC ({mode}), seed {args.seed}")
    rows: list[Row] = []
    records: dict[str, Any] = {}
    for run in runs:
        bench = bench_heron if run.system == "heron" else bench_sb3
        key = run.name if run.seed is None else f"{run.name}_s{run.seed}"
        row, records[key] = bench(run, args)
        rows.append(row)

    ratios = compute_ratios(rows)
    log("\n" + format_table(rows))
    log("\n" + format_curves(rows))
    log("\n" + format_ratios(ratios))
    sac = sac_summary(rows)
    log("\n" + format_sac(sac, ratios))
    log("\n" + format_iteration_times(rows))
    log("\n" + NOTES)

    results = {
        "benchmark": "pendulum",
        "quick": args.quick,
        "only": list(only),
        "seed": args.seed,
        "eval": {"every_steps": EVAL_EVERY, "episodes": EVAL_EPISODES, "greedy": True},
        "heron_reward_scale": REWARD_SCALE,
        "threshold_return": THRESHOLD_RETURN,
        "speedup_target": SPEEDUP_TARGET,
        "machine": machine_info(),
        "total_wall_s": time.perf_counter() - started,
        "rows": [{**asdict(r), "updates_per_step": r.updates_per_step} for r in rows],
        "ratios": ratios,
        "sac": sac,
        "runs": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    log(f"\nresults written to {args.out} ({results['total_wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
