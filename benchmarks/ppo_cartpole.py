"""PPO on CartPole-v1: heron against rejax and Stable-Baselines3, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/ppo_cartpole.py [--quick] [--out PATH]
                                                [--systems rejax,sb3,heron]

Every measurement is a fresh subprocess, so whole-process times include
interpreter start-up, imports and compilation:

* rejax 0.1.3 (gymnax 0.0.9, jit-compiled) in ``benchmarks/.venvs/rejax`` with
  rejax's own CartPole PPO config;
* Stable-Baselines3 (torch CPU, 8 DummyVecEnv envs) in
  ``benchmarks/.venvs/sb3`` with rl-baselines3-zoo's CartPole hyperparameters;
* heron through its CLI (``.venv/bin/heron train ppo``), in gymnax and gym
  modes.

The peer venvs are created on first use from the pinned lists in
``benchmarks/_peers/*-requirements.txt`` (and rebuilt when a list changes).
A peer whose venv cannot be made is reported and skipped. ``--quick`` skips the
1M-step runs. Timings are reported, never asserted. Results go to ``--out`` as
JSON (default ``benchmarks/results/ppo_cartpole.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _harness import ChildResult, SetupError, ensure_venv, run_timed, wait_for_idle

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"
VENVS = BENCH / ".venvs"

STEPS_100K = 100_000
STEPS_1M = 1_000_000
HERON_GYM_SOLVE_STEPS = 150_000
SOLVED_RETURN = 475.0
EVAL_EVERY = 5_000  # peers: env steps between greedy evaluations
EVAL_EPISODES = 8  # peers: episodes per greedy evaluation
SPEEDUP_TARGET_GYM_VS_SB3 = 3.0
BUSY_WARNING = 0.25  # warn when other processes keep this fraction of the CPUs busy


@dataclass
class Summary:
    """One row of the results table."""

    system: str
    mode: str
    status: str = "ok"  # ok | partial | failed | skipped
    whole_s_100k: float | None = None
    whole_s_1m: float | None = None
    steps_per_s: float | None = None
    steps_per_s_end_to_end: float | None = None  # heron: its steps_per_s (compile, evals included)
    steps_to_solved: int | None = None
    solved_budget: int | None = None  # largest budget searched for the solved step
    updates_per_1k: float | None = None  # gradient updates per 1,000 collected env steps
    epochs: float | None = None  # passes over each collected sample
    disturbed: bool = False  # other processes loaded the CPUs during one of its runs
    reason: str | None = None


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------- runs


def record_run(runs: dict, name: str, label: str, child: ChildResult) -> dict | None:
    """Store ``child`` under ``runs[name]``, print one progress line, return its payload."""
    runs[name] = child.to_json()
    note = ""
    if other_load(runs[name]) > BUSY_WARNING:
        note = (
            f"  [warning: other processes used up to {other_load(runs[name]):.0%} "
            "of the CPUs; timing disturbed]"
        )
    if child.ok:
        log(f"  {label:<34} {child.wall_s:8.1f} s{note}")
        return child.payload
    log(f"  {label:<34} FAILED ({child.error}){note}")
    if child.stderr_tail:
        log("    " + child.stderr_tail.replace("\n", "\n    "))
    return None


def other_load(run: dict) -> float:
    """Highest CPU share other processes took just before or during ``run``."""
    return max(run.get("cpu_busy_before") or 0.0, run.get("cpu_other_during") or 0.0)


def any_disturbed(runs: dict) -> bool:
    """Whether other processes loaded the CPUs during any of ``runs``."""
    return any(other_load(run) > BUSY_WARNING for run in runs.values())


def payload_value(runs: dict, names: tuple[str, ...], key: str) -> Any:
    """First ``key`` found in the payloads of the successful ``runs`` named, in order."""
    for name in names:
        result = (runs.get(name) or {}).get("result") or {}
        if "error" not in runs.get(name, {}) and result.get(key) is not None:
            return result[key]
    return None


def wall_of(runs: dict, name: str) -> float | None:
    """Whole-process seconds of run ``name``, None if it is missing or failed."""
    run = runs.get(name)
    return run["wall_s"] if run and "error" not in run else None


def status_of(runs: dict) -> str:
    """ok, partial (some runs failed) or failed (all did, or there were none)."""
    failed = sum("error" in run for run in runs.values())
    if not runs or failed == len(runs):
        return "failed"
    return "partial" if failed else "ok"


# --------------------------------------------------------------------------- peers


def prepare_peer(name: str) -> Path:
    """The python of peer ``name``'s venv, created if needed (may raise SetupError)."""
    return ensure_venv(VENVS / name, PEERS / f"{name}-requirements.txt", log=log)


def measure(argv: list[str], args, env: dict[str, str] | None = None) -> ChildResult:
    """Run one measurement process, first waiting (``--wait-idle``) for a quiet machine."""
    if args.wait_idle > 0:
        wait_for_idle(args.wait_idle, BUSY_WARNING)
    return run_timed(argv, args.timeout, cwd=ROOT, env=env)


def peer_child(python: Path, script: str, mode: str, steps: int, args) -> ChildResult:
    """Run one peer measurement process."""
    argv = [
        str(python), str(PEERS / script), "--mode", mode, "--steps", str(steps),
        "--seed", str(args.seed), "--eval-every", str(EVAL_EVERY),
        "--eval-episodes", str(EVAL_EPISODES), "--solved-return", str(SOLVED_RETURN),
    ]  # fmt: skip
    return measure(argv, args)


def peer_plan(quick: bool, with_throughput: bool) -> list[tuple[str, str, int]]:
    """(run name, mode, steps) for a peer, in execution order."""
    plan = [("whole_100k", "whole", STEPS_100K)]
    if not quick:
        plan.append(("whole_1m", "whole", STEPS_1M))
    if with_throughput:
        plan.append(("throughput", "throughput", STEPS_100K if quick else STEPS_1M))
    plan.append(("eval", "eval", STEPS_100K))
    return plan


def bench_peer(name: str, script: str, mode_label: str, args, with_throughput: bool):
    """Run all measurements of one peer; returns (Summary, JSON record)."""
    log(f"\n[{name}] {mode_label}")
    summary = Summary(name, mode_label)
    record: dict[str, Any] = {"runs": {}}
    try:
        python = prepare_peer(name)
    except SetupError as exc:
        log(f"  skipped: could not prepare its venv: {exc}")
        summary.status, summary.reason = "skipped", f"venv setup failed: {exc}"
        return summary, record
    runs = record["runs"]
    for run_name, mode, steps in peer_plan(args.quick, with_throughput):
        label = f"{mode} {steps:,} steps"
        payload = record_run(runs, run_name, label, peer_child(python, script, mode, steps, args))
        if payload and mode == "eval":
            runs[run_name]["steps_to_solved"] = payload.get("steps_to_solved")
    first = next((r["result"] for r in runs.values() if r.get("result")), None) or {}
    record["versions"] = first.get("versions")
    record["config"] = first.get("config")

    summary.status = status_of(runs)
    summary.disturbed = any_disturbed(runs)
    summary.whole_s_100k = wall_of(runs, "whole_100k")
    summary.whole_s_1m = wall_of(runs, "whole_1m")
    rate_runs = ("throughput",) if with_throughput else ("whole_1m", "whole_100k")
    summary.steps_per_s = payload_value(runs, rate_runs, "steps_per_s")
    summary.updates_per_1k = payload_value(runs, ("whole_100k", "eval"), "updates_per_1k_steps")
    summary.epochs = payload_value(runs, ("whole_100k", "eval"), "epochs")
    summary.steps_to_solved = payload_value(runs, ("eval",), "steps_to_solved")
    summary.solved_budget = payload_value(runs, ("eval",), "steps")
    return summary, record


def bench_rejax(args):
    return bench_peer("rejax", "rejax_ppo.py", "gymnax, jit", args, with_throughput=True)


def bench_sb3(args):
    return bench_peer("sb3", "sb3_ppo.py", "gymnasium, 8x DummyVecEnv", args, with_throughput=False)


# --------------------------------------------------------------------------- heron


def greedy_evals(metrics_path: Path) -> list[dict[str, Any]]:
    """Greedy (temperature 0) evaluation lines of a heron ``metrics.jsonl``."""
    evals = []
    with open(metrics_path) as lines:
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("kind") == "eval" and entry.get("temperature") == 0.0:
                evals.append({"step": entry["step"], "return_mean": entry["return_mean"]})
    return evals


def first_solved(evals: list[dict[str, Any]]) -> int | None:
    """Smallest step whose greedy mean return reaches SOLVED_RETURN."""
    steps = [e["step"] for e in evals if e["return_mean"] >= SOLVED_RETURN]
    return min(steps) if steps else None


def reset_dir(path: Path) -> Path:
    """Empty benchmark-owned directory ``path`` (removing an old one)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def heron_work(config: dict[str, Any]) -> dict[str, float]:
    """Gradient updates per 1,000 env steps and epochs, from a run's config.json (best effort:
    {} when the fields are not there; not part of the CLI contract)."""
    try:
        run, ppo = config["run"], config["ppo"]
        batch = run["num_envs"] * ppo["unroll_length"]  # env steps per iteration (one seed)
        minibatches = batch / ppo["sequence_length"] / ppo["batch_size"]
        updates = ppo["num_epochs"] * minibatches
        return {"updates_per_1k_steps": 1000 * updates / batch, "epochs": ppo["num_epochs"]}
    except (KeyError, TypeError, ZeroDivisionError):
        return {}


def heron_update_work(run_dir: Path) -> dict[str, float]:
    """``heron_work`` of the run in ``run_dir``."""
    try:
        return heron_work(json.loads((run_dir / "config.json").read_text()))
    except (OSError, ValueError):
        return {}


def heron_run(args, env: str, steps: int, run_dir: Path, cache_dir: Path | None):
    """Run ``heron train ppo`` once; returns (child, greedy-eval record).

    ``cache_dir`` is given to heron as its JAX compilation cache
    (HERON_COMPILE_CACHE); None leaves heron's default cache in place.
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        str(args.heron), "train", "ppo", "--env", env, "--steps", str(steps),
        "--seed", str(args.seed), "--run-dir", str(run_dir),
    ]  # fmt: skip
    child = measure(argv, args, env={"HERON_COMPILE_CACHE": str(cache_dir)} if cache_dir else None)
    extra: dict[str, Any] = {"compile_cache": str(cache_dir) if cache_dir else "heron default"}
    if child.ok:
        actual_dir = Path(child.payload.get("run_dir") or run_dir)
        extra.update(heron_update_work(actual_dir))
        metrics = actual_dir / "metrics.jsonl"
        if metrics.exists():
            evals = greedy_evals(metrics)
            extra.update(greedy_evals=evals, steps_to_solved=first_solved(evals))
        else:
            extra.update(greedy_evals=None, note=f"{metrics} not found")
    return child, extra


def heron_summary(mode: str, runs: dict, order: list[tuple[str, int]]) -> Summary:
    """Summarise one heron mode; ``order`` lists its (run name, steps) by ascending budget."""
    summary = Summary("heron", mode, status=status_of(runs), disturbed=any_disturbed(runs))
    summary.whole_s_100k = wall_of(runs, f"{mode}_100k")
    summary.whole_s_1m = wall_of(runs, f"{mode}_1m")
    by_budget = tuple(name for name, _ in reversed(order))
    summary.steps_per_s = payload_value(runs, by_budget, "steps_per_s_after_compile")
    summary.steps_per_s_end_to_end = payload_value(runs, by_budget, "steps_per_s")
    ok_runs = [run for run in runs.values() if "error" not in run]
    summary.updates_per_1k = next((r.get("updates_per_1k_steps") for r in ok_runs), None)
    summary.epochs = next((r.get("epochs") for r in ok_runs), None)
    for name, _ in order:
        run = runs.get(name, {})
        if "error" in run or "greedy_evals" not in run:
            continue
        summary.solved_budget = run["result"].get("steps")
        if run.get("steps_to_solved") is not None:
            summary.steps_to_solved = run["steps_to_solved"]
            break
    return summary


def heron_plans(quick: bool) -> dict[str, list[tuple[str, int]]]:
    """(run name, steps) per heron env mode, by ascending budget."""
    gymnax = [("gymnax_100k", STEPS_100K)] + ([] if quick else [("gymnax_1m", STEPS_1M)])
    gym = [("gym_100k", STEPS_100K), ("gym_150k", HERON_GYM_SOLVE_STEPS)]
    return {"gymnax": gymnax, "gym": gym}


def heron_warm_rerun(args, work: Path, records: dict) -> Summary:
    """Repeat gymnax 100k on the compilation cache its cold run filled."""
    name = "gymnax_100k_warm"
    cache = work / "gymnax_100k.jax-cache"
    child, extra = heron_run(args, "gymnax:CartPole-v1", STEPS_100K, work / name, cache)
    record_run(records, name, "gymnax 100,000 steps, warm cache", child)
    records[name].update(extra)
    runs = {name: records[name]}
    warm = Summary("heron", "gymnax, warm cache", status=status_of(runs))
    warm.disturbed = any_disturbed(runs)
    warm.whole_s_100k = wall_of(runs, name)
    return warm


def bench_heron(args) -> tuple[list[Summary], dict]:
    """heron in gymnax mode (100k, 1M) and gym mode (100k, 150k).

    With ``--heron-cache cold`` (default) every run gets a new, empty JAX
    compilation cache, so compilation is timed as for rejax; the gymnax 100k
    run is then repeated on its filled cache for a warm-cache figure.
    """
    log(f"\n[heron] {args.heron} (compile cache: {args.heron_cache})")
    heron = Path(args.heron)
    if not (heron.is_file() and os.access(heron, os.X_OK)):
        reason = f"{heron} not found or not executable"
        log(f"  skipped: {reason}")
        return [
            Summary("heron", "gymnax", status="skipped", reason=reason),
            Summary("heron", "gym", status="skipped", reason=reason),
        ], {"runs": {}}

    work = args.out.parent / "heron_runs"
    cold = args.heron_cache == "cold"
    records: dict[str, Any] = {}
    summaries = []
    for mode, plan in heron_plans(args.quick).items():
        runs: dict[str, Any] = {}
        for name, steps in plan:
            cache = reset_dir(work / f"{name}.jax-cache") if cold else None
            child, extra = heron_run(args, f"{mode}:CartPole-v1", steps, work / name, cache)
            record_run(runs, name, f"{mode} {steps:,} steps", child)
            runs[name].update(extra)
        summaries.append(heron_summary(mode, runs, plan))
        records.update(runs)

    if cold and "error" not in records.get("gymnax_100k", {"error": True}):
        summaries.insert(1, heron_warm_rerun(args, work, records))
    return summaries, {"compile_cache": args.heron_cache, "runs": records}


# --------------------------------------------------------------------------- report


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def find(summaries: list[Summary], system: str, mode: str | None = None) -> Summary | None:
    for summary in summaries:
        if summary.system == system and (mode is None or summary.mode == mode):
            return summary
    return None


def compute_ratios(summaries: list[Summary]) -> dict[str, float | None]:
    """heron's ratios against the peers (None where a side is missing)."""
    empty = Summary("", "")
    rejax = find(summaries, "rejax") or empty
    sb3 = find(summaries, "sb3") or empty
    gymnax = find(summaries, "heron", "gymnax") or empty
    gym = find(summaries, "heron", "gym") or empty
    return {
        "heron_gymnax_over_rejax_steps_per_s": ratio(gymnax.steps_per_s, rejax.steps_per_s),
        "heron_gymnax_over_rejax_whole_s_100k": ratio(gymnax.whole_s_100k, rejax.whole_s_100k),
        "heron_gym_over_sb3_steps_per_s": ratio(gym.steps_per_s, sb3.steps_per_s),
        "heron_gymnax_end_to_end_over_rejax_steps_per_s": ratio(
            gymnax.steps_per_s_end_to_end, rejax.steps_per_s
        ),
        "heron_gym_end_to_end_over_sb3_steps_per_s": ratio(
            gym.steps_per_s_end_to_end, sb3.steps_per_s
        ),
    }


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fmt_solved(summary: Summary) -> str:
    if summary.steps_to_solved is not None:
        return f"{summary.steps_to_solved:,}"
    if summary.solved_budget:
        return f"> {summary.solved_budget:,}"
    return "-"


def fmt_work(summary: Summary) -> str:
    if summary.updates_per_1k is None or summary.epochs is None:
        return "-"
    return f"{summary.updates_per_1k:.1f}, {summary.epochs:g}"


def table_row(s: Summary) -> tuple[str, ...]:
    status = s.status + ("*" if s.disturbed else "")
    return (
        s.system,
        s.mode,
        status,
        fmt_seconds(s.whole_s_100k),
        fmt_seconds(s.whole_s_1m),
        fmt_rate(s.steps_per_s),
        fmt_solved(s),
        fmt_work(s),
    )


def format_table(summaries: list[Summary]) -> str:
    """Fixed-width results table."""
    header = (
        "system",
        "mode",
        "status",
        "whole s @100k",
        "whole s @1M",
        "steps/s",
        "steps to greedy>=475",
        "updates/1k, epochs",
    )
    rows = [table_row(summary) for summary in summaries]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    numeric = {3, 4, 5, 6, 7}

    def line(row) -> str:
        cells = [
            str(cell).rjust(width) if i in numeric else str(cell).ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells)

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def format_ratios(ratios: dict[str, float | None]) -> str:
    def show(value: float | None, suffix: str = "x") -> str:
        return "n/a" if value is None else f"{value:.2f}{suffix}"

    gym_vs_sb3 = ratios["heron_gym_over_sb3_steps_per_s"]
    verdict = ""
    if gym_vs_sb3 is not None:
        met = gym_vs_sb3 >= SPEEDUP_TARGET_GYM_VS_SB3
        verdict = f"  (target >= {SPEEDUP_TARGET_GYM_VS_SB3:.0f}x: {'met' if met else 'not met'})"
    return "\n".join(
        [
            "heron ratios:",
            f"  heron-gymnax steps/s / rejax steps/s           "
            f"{show(ratios['heron_gymnax_over_rejax_steps_per_s'])}  (higher is better)",
            f"  heron-gymnax whole-process 100k s / rejax's    "
            f"{show(ratios['heron_gymnax_over_rejax_whole_s_100k'])}  (lower is better)",
            f"  heron-gym steps/s / SB3 steps/s                {show(gym_vs_sb3)}{verdict}",
            "  with heron's end-to-end steps_per_s (its compile, evals, checkpoints included):",
            f"  heron-gymnax end-to-end steps/s / rejax's      "
            f"{show(ratios['heron_gymnax_end_to_end_over_rejax_steps_per_s'])}",
            f"  heron-gym end-to-end steps/s / SB3's           "
            f"{show(ratios['heron_gym_end_to_end_over_sb3_steps_per_s'])}",
        ]
    )


NOTES = f"""\
notes:
  whole s      wall clock of a fresh process (start-up, imports, compilation, training).
               rejax/SB3 timing runs train without evaluation; heron's include its own evals.
  steps/s      rejax: second call of the compiled train function; SB3: steps / learn() time
               (run without evaluation, torch on 1 thread: its fastest setting here); heron:
               steps_per_s_after_compile of its largest run.
  updates/1k   gradient updates per 1,000 collected env steps, and epochs (passes over each
               sample): each system's own PPO settings, so steps/s also reflects how much
               learning work each does per env step, not only framework overhead.
  greedy>=475  first evaluation with greedy mean return >= {SOLVED_RETURN:g}. rejax/SB3: every
               {EVAL_EVERY:,} env steps over {EVAL_EPISODES} episodes, in a {STEPS_100K:,}-step run;
               heron: its own eval lines (temperature 0). "> N": not reached within N steps.
  *            other processes loaded the CPUs during some of that row's runs, so its
               timings are disturbed (cpu_busy_before / cpu_other_during in the JSON).
  one seed; figures are single measurements on this machine."""


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_generation() -> str | None:
    """The CPU's family, model and stepping (Linux's /proc/cpuinfo), which a VM's model name
    ("AMD EPYC") may leave out: e.g. family 26 is AMD's Zen 5, whose AVX-512 XLA uses."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("cpu family", "model", "stepping"):
                    fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        return None
    return " ".join(f"{key} {value}" for key, value in fields.items()) or None


def boot_id() -> str | None:
    """This boot of the machine (Linux's random boot id): a VM started afresh gets a new one,
    and VMs that report the same CPU model can differ in speed, so records compare
    within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            or None
        )
    except OSError:
        commit = None
    return {
        "platform": platform.platform(),
        "processor": cpu_model(),
        "cpu_generation": cpu_generation(),
        "boot_id": boot_id(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "git_commit": commit,
    }


# --------------------------------------------------------------------------- main

SYSTEMS = ("rejax", "sb3", "heron")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1M-step runs")
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH / "results" / "ppo_cartpole.json",
        help="results JSON path",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {','.join(SYSTEMS)}",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heron", default=str(ROOT / ".venv" / "bin" / "heron"), help="heron CLI")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds allowed per measurement process"
    )
    parser.add_argument(
        "--heron-cache",
        choices=("cold", "default"),
        default="cold",
        help="cold: a new empty JAX compilation cache per heron run (plus one warm-cache "
        "rerun of gymnax 100k); default: heron's own cache, as left by earlier runs",
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each measurement, wait up to this long for other CPU load to go away",
    )
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(args.systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log(f"PPO CartPole-v1 benchmark ({'quick' if args.quick else 'full'}), seed {args.seed}")

    benches: dict[str, Callable] = {"rejax": bench_rejax, "sb3": bench_sb3}
    summaries: list[Summary] = []
    records: dict[str, Any] = {}
    for system in args.systems:
        if system == "heron":
            heron_summaries, records["heron"] = bench_heron(args)
            summaries.extend(heron_summaries)
        else:
            summary, records[system] = benches[system](args)
            summaries.append(summary)

    ratios = compute_ratios(summaries)
    log("\n" + format_table(summaries))
    log("\n" + format_ratios(ratios))
    log("\n" + NOTES)

    results = {
        "benchmark": "ppo_cartpole",
        "quick": args.quick,
        "seed": args.seed,
        "solved_return": SOLVED_RETURN,
        "peer_eval": {"every_steps": EVAL_EVERY, "episodes": EVAL_EPISODES, "greedy": True},
        "machine": machine_info(),
        "total_wall_s": time.perf_counter() - started,
        "summary": [asdict(s) for s in summaries],
        "ratios": ratios,
        "systems": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    log(f"\nresults written to {args.out} ({results['total_wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
