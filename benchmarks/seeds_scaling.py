"""Many seeds in one program: heron's ``--seeds K`` against K separate runs.

Usage (from the repository root)::

    .venv/bin/python benchmarks/seeds_scaling.py [--steps 100000] [--seeds 8]
        [--cache cold|warm|both] [--out benchmarks/results/seeds_scaling.json]

PPO on gymnax CartPole-v1 with heron's default settings. Three measurements:

1. Whole-process wall clock (fresh subprocess: interpreter start-up, imports,
   compilation, training, evaluation, checkpoints) of ONE
   ``heron train ppo --seeds K`` against K sequential ``--seed s`` runs
   (s = 0..K-1) of the same steps each, and their ratio (target >= 1.5x).
   ``--cache cold`` gives every process its own empty JAX compilation cache
   (``HERON_COMPILE_CACHE``), as a user's first runs are; ``--cache warm``
   shares one cache already filled with each configuration's programs (by
   untimed warm-up runs; with ``both``, the cold ``--seeds K`` run's cache dir
   is adopted as the shared one, so only ``--seed 0`` needs a warm-up).
2. Training throughput (``steps_per_s_after_compile`` of heron's JSON line,
   summed over seeds) for K = 1, 4, 8 seeds in one program, per seed, and the
   scaling efficiency relative to K = 1.
3. Sanity of the K-seed run: ``per_seed`` has K entries for seeds 0..K-1;
   their final greedy returns (mean, min); whether each seed's parameters
   match those of the separate run of that seed (reported, not required).

Timings are printed and stored, never asserted. A failing process has its
stderr tail printed and the script goes on. Results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import run_timed, wait_for_idle

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "gymnax:CartPole-v1"
SPEEDUP_TARGET = 1.5
BUSY_WARNING = 0.25  # flag a run when other processes kept this CPU share busy
FIRST_SEED = 0

CacheFor = Callable[["Config"], Path]  # the compilation cache dir of each process


def log(message: str = "") -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class Config:
    """One heron command line: ``seeds`` seeds in one program, starting at ``seed``."""

    seed: int
    seeds: int

    @property
    def label(self) -> str:
        return f"--seeds {self.seeds}" if self.seeds > 1 else f"--seed {self.seed}"


class Heron:
    """Runs ``heron train ppo`` processes, each in a fresh run dir under ``scratch``."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.executable = args.heron
        self.steps = args.steps
        self.timeout = args.timeout
        self.wait_idle = args.wait_idle
        self.scratch = scratch

    def fresh_dir(self, prefix: str) -> Path:
        """A new empty directory under the scratch dir."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.scratch))

    def argv(self, config: Config, run_dir: Path) -> list[str]:
        return [
            self.executable, "train", "ppo", "--env", ENV_ID, "--steps", str(self.steps),
            "--seed", str(config.seed), "--seeds", str(config.seeds), "--run-dir", str(run_dir),
        ]  # fmt: skip

    def run(self, config: Config, cache_dir: Path, purpose: str) -> dict[str, Any]:
        """Run ``config`` with ``cache_dir`` as its compilation cache; return its record.

        The record holds the command, whole-process ``wall_s``, the JSON line as
        ``result`` and, on failure, ``error`` and ``stderr_tail``. One progress
        line is printed (with the stderr tail on failure).
        """
        if self.wait_idle > 0:
            wait_for_idle(self.wait_idle, BUSY_WARNING)
        cached_before = cache_entries(cache_dir)
        child = run_timed(
            self.argv(config, self.fresh_dir("run-")),
            self.timeout,
            cwd=ROOT,
            env={"HERON_COMPILE_CACHE": str(cache_dir)},
        )
        record = {
            "purpose": purpose,
            "seed": config.seed,
            "seeds": config.seeds,
            "cache_dir": str(cache_dir),
        }
        record |= child.to_json()
        record["programs_compiled"] = cache_entries(cache_dir) - cached_before
        record["disturbed"] = other_load(record) > BUSY_WARNING
        report_run(f"{purpose} {config.label}", record)
        return record


def cache_entries(cache_dir: Path) -> int:
    """Programs stored in a JAX compilation cache dir (one ``*-cache`` file each)."""
    return sum(1 for _ in cache_dir.glob("*-cache"))


def other_load(record: dict[str, Any]) -> float:
    """Highest CPU share other processes used just before or during the run."""
    return max(record.get("cpu_busy_before") or 0.0, record.get("cpu_other_during") or 0.0)


def report_run(label: str, record: dict[str, Any]) -> None:
    """Print one progress line for a finished run."""
    note = f"  [other load {other_load(record):.0%}: disturbed]" if record["disturbed"] else ""
    if ok(record):
        compiled = f"{record['programs_compiled']:3d} programs compiled"
        log(f"  {label:<28} {record['wall_s']:7.1f} s  {compiled}{note}")
        return
    log(f"  {label:<28} FAILED ({record['error']}){note}")
    if record.get("stderr_tail"):
        log("    " + record["stderr_tail"].replace("\n", "\n    "))


def ok(record: dict[str, Any] | None) -> bool:
    return record is not None and "error" not in record and record.get("result") is not None


def result_value(record: dict[str, Any] | None, key: str) -> Any:
    """``key`` of a successful run's JSON line, else None."""
    return record["result"].get(key) if ok(record) else None


# --------------------------------------------------------------------------- 1. wall clock


def sequential_configs(n_seeds: int) -> list[Config]:
    return [Config(FIRST_SEED + k, 1) for k in range(n_seeds)]


def vmapped_config(n_seeds: int) -> Config:
    return Config(FIRST_SEED, n_seeds)


def measure_wall_clock(heron: Heron, n_seeds: int, cache: str, cache_for: CacheFor) -> dict:
    """Time one ``--seeds n_seeds`` process against ``n_seeds`` single-seed processes."""
    log(f"\n[{cache} cache] one program with {n_seeds} seeds, then {n_seeds} separate runs")
    vmapped = heron.run(vmapped_config(n_seeds), cache_for(vmapped_config(n_seeds)), cache)
    sequential = [heron.run(c, cache_for(c), cache) for c in sequential_configs(n_seeds)]
    complete = ok(vmapped) and all(ok(r) for r in sequential)
    vmapped_s = vmapped["wall_s"] if ok(vmapped) else None
    sequential_s = sum(r["wall_s"] for r in sequential) if complete else None
    return {
        "cache": cache,
        "vmapped_wall_s": vmapped_s,
        "sequential_wall_s": sequential_s,
        "sequential_run_wall_s": [r["wall_s"] if ok(r) else None for r in sequential],
        "ratio": ratio(sequential_s, vmapped_s),
        "target": SPEEDUP_TARGET,
        "complete": complete,
        "disturbed": any(r["disturbed"] for r in [vmapped, *sequential]),
        "programs_compiled": sum(r["programs_compiled"] for r in [vmapped, *sequential]),
        "vmapped": vmapped,
        "sequential": sequential,
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def cold_caches(heron: Heron) -> CacheFor:
    """Every process gets a new, empty compilation cache dir."""
    return lambda config: heron.fresh_dir("cache-cold-")


def warm_cache(
    heron: Heron, configs: list[Config], cold_runs: list[dict[str, Any]]
) -> tuple[CacheFor, list[dict[str, Any]]]:
    """One shared cache dir, filled (untimed) with the programs of each of ``configs``.

    JAX's cache keys contain the cache dir's path (through XLA's cache options),
    so a filled dir cannot be copied elsewhere; instead, the dir of the first
    configuration's successful cold run, if any, is adopted as the shared one,
    and every configuration not compiled there yet is run once as a warm-up.
    Returns the ``cache_for`` and the records of the warm-up runs.
    """
    adopted = next((r for r in cold_runs if ok(r) and run_config(r) == configs[0]), None)
    if adopted is not None:
        shared = Path(adopted["cache_dir"])
        log(f"  {'warm-up ' + configs[0].label:<28} done by its cold run (cache dir adopted)")
    else:
        shared = heron.fresh_dir("cache-warm-")
    pending = configs if adopted is None else configs[1:]
    warmups = [heron.run(config, shared, "warm-up") for config in pending]
    return (lambda config: shared), warmups


def run_config(record: dict[str, Any]) -> Config:
    return Config(record["seed"], record["seeds"])


# --------------------------------------------------------------------------- 2. throughput


def throughput_samples(records: Iterable[dict[str, Any]], seeds: int) -> list[float]:
    """``steps_per_s_after_compile`` of every successful run of ``seeds`` seeds."""
    values = (result_value(r, "steps_per_s_after_compile") for r in records if r["seeds"] == seeds)
    return [float(v) for v in values if v is not None]


def measure_scaling(
    heron: Heron, sizes: list[int], records: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Training steps/s (summed over seeds) for each number of seeds in ``sizes``.

    Runs already in ``records`` are reused (median over them); a size without
    one gets a run of its own, with a cold cache (its program differs anyway).
    Returns the rows and the records of the extra runs.
    """
    log(f"\n[throughput] seeds {', '.join(map(str, sizes))} (reusing the runs above)")
    extra = []
    for k in sizes:
        if not throughput_samples(records, k):
            extra.append(heron.run(Config(FIRST_SEED, k), heron.fresh_dir("cache-"), "scaling"))
    everything = [*records, *extra]
    rows = []
    for k in sizes:
        samples = throughput_samples(everything, k)
        total = statistics.median(samples) if samples else None
        rows.append(
            {
                "seeds": k,
                "runs": len(samples),
                "steps_per_s": total,
                "per_seed_steps_per_s": total / k if total else None,
                "samples": samples,
            }
        )
    base = next((r["per_seed_steps_per_s"] for r in rows if r["seeds"] == 1), None)
    for row in rows:
        row["efficiency"] = ratio(row["per_seed_steps_per_s"], base)
    return rows, extra


# --------------------------------------------------------------------------- 3. sanity


def check_seeds(n_seeds: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-seed results of the first successful ``n_seeds``-seed run.

    Also counts the seeds whose parameters digest equals that of the
    single-seed run of the same seed (informative: vmapping may change the
    floating-point reduction order).
    """
    vmapped = next((r for r in records if r["seeds"] == n_seeds and ok(r)), None)
    if vmapped is None:
        return {"ok": False, "reason": f"no successful --seeds {n_seeds} run"}
    per_seed = vmapped["result"].get("per_seed") or []
    expected = list(range(FIRST_SEED, FIRST_SEED + n_seeds))
    seeds = [entry.get("seed") for entry in per_seed]
    finals = [entry.get("final_eval_return") for entry in per_seed]
    returns = [float(v) for v in finals if v is not None]
    single_digests = {
        r["seed"]: r["result"].get("params_digest") for r in records if r["seeds"] == 1 and ok(r)
    }
    compared = [e for e in per_seed if e.get("seed") in single_digests]
    matching = sum(e.get("params_digest") == single_digests[e["seed"]] for e in compared)
    return {
        "ok": seeds == expected and len(returns) == n_seeds,
        "entries": len(per_seed),
        "expected_entries": n_seeds,
        "seeds": seeds,
        "final_greedy_returns": finals,
        "final_greedy_mean": statistics.fmean(returns) if returns else None,
        "final_greedy_min": min(returns) if returns else None,
        "best_greedy_returns": [entry.get("best_eval_return") for entry in per_seed],
        "digests_matching_single_seed_runs": matching,
        "digests_compared": len(compared),
    }


# --------------------------------------------------------------------------- report


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def wall_clock_table(blocks: list[dict[str, Any]], n_seeds: int) -> list[str]:
    lines = [
        f"Whole-process wall clock, {n_seeds} seeds (target ratio >= {SPEEDUP_TARGET}x)",
        f"  {'cache':<6} {'1 x --seeds ' + str(n_seeds):>14} {f'{n_seeds} x --seed s':>14}"
        f" {'per run (min-max)':>20} {'ratio':>7}",
    ]
    for b in blocks:
        runs = [w for w in b["sequential_run_wall_s"] if w is not None]
        spread = f"{min(runs):.1f}-{max(runs):.1f} s" if runs else "-"
        flag = "  *disturbed" if b["disturbed"] else ""
        if b["cache"] == "warm" and b["programs_compiled"]:
            flag += f"  *{b['programs_compiled']} cache misses"
        lines.append(
            f"  {b['cache']:<6} {fmt(b['vmapped_wall_s'], '.1f', ' s'):>14}"
            f" {fmt(b['sequential_wall_s'], '.1f', ' s'):>14} {spread:>20}"
            f" {fmt(b['ratio'], '.2f', 'x'):>7}{flag}"
        )
    return lines


def scaling_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "Training throughput (steps_per_s_after_compile; training iterations only)",
        f"  {'seeds':>5} {'runs':>4} {'steps/s (sum)':>14} {'per seed':>10} {'efficiency':>10}",
    ]
    for r in rows:
        lines.append(
            f"  {r['seeds']:>5} {r['runs']:>4} {fmt(r['steps_per_s'], ',.0f'):>14}"
            f" {fmt(r['per_seed_steps_per_s'], ',.0f'):>10} {fmt(r['efficiency'], '.2f'):>10}"
        )
    return lines


def sanity_lines(sanity: dict[str, Any], n_seeds: int) -> list[str]:
    if "entries" not in sanity:
        return [f"Seeds sanity: {sanity['reason']}"]
    finals = ", ".join(fmt(v, ".0f") for v in sanity["final_greedy_returns"])
    return [
        f"Seeds sanity (--seeds {n_seeds}): per_seed has {sanity['entries']} entries,"
        f" seeds {sanity['seeds']} -> {'OK' if sanity['ok'] else 'NOT OK'}",
        f"  final greedy returns: [{finals}]  mean {fmt(sanity['final_greedy_mean'], '.1f')}"
        f"  min {fmt(sanity['final_greedy_min'], '.1f')}",
        f"  params equal to the single-seed run of the same seed:"
        f" {sanity['digests_matching_single_seed_runs']}/{sanity['digests_compared']}",
    ]


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=8, help="seeds in the vmapped run")
    parser.add_argument("--cache", choices=("cold", "warm", "both"), default="both")
    parser.add_argument("--scaling", default="1,4,8", help="seed counts for the throughput table")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/seeds_scaling.json")
    parser.add_argument("--heron", default=str(ROOT / ".venv/bin/heron"), help="the heron CLI")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument(
        "--wait-idle", type=float, default=0.0,
        help="wait up to this many seconds for other CPU load to go before each run",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be at least 2")
    args.sizes = sorted({1, args.seeds, *(int(k) for k in args.scaling.split(",") if k.strip())})
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start, started = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    log(f"heron PPO {ENV_ID}, {args.steps:,} steps per seed, {os.cpu_count()} CPUs")
    modes = ("cold", "warm") if args.cache == "both" else (args.cache,)
    blocks: list[dict[str, Any]] = []
    timed: list[dict[str, Any]] = []  # every timed run, in order
    warmups: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="heron-seeds-") as tmp:
        heron = Heron(args, Path(tmp))
        for mode in modes:
            if mode == "cold":
                cache_for = cold_caches(heron)
            else:
                log("\n[warm cache] filling one shared cache (untimed)")
                configs = [vmapped_config(args.seeds), sequential_configs(args.seeds)[0]]
                cache_for, warmups = warm_cache(heron, configs, timed)
            block = measure_wall_clock(heron, args.seeds, mode, cache_for)
            blocks.append(block)
            timed += [block["vmapped"], *block["sequential"]]
        scaling, extra = measure_scaling(heron, args.sizes, timed)
    sanity = check_seeds(args.seeds, timed)

    report = [
        "",
        *wall_clock_table(blocks, args.seeds),
        "",
        *scaling_table(scaling),
        "",
        *sanity_lines(sanity, args.seeds),
        "",
        f"*disturbed: other processes kept over {BUSY_WARNING:.0%} of the CPUs busy"
        " just before or during a run of that row",
    ]
    log("\n".join(report))
    results = {
        "benchmark": "seeds_scaling",
        "env": ENV_ID,
        "algo": "ppo",
        "steps_per_seed_requested": args.steps,
        "steps_per_seed": next((result_value(r, "steps") for r in timed if ok(r)), None),
        "seeds": args.seeds,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "started": started,
        "total_wall_s": time.perf_counter() - start,
        "wall_clock": blocks,
        "scaling": scaling,
        "sanity": sanity,
        "warmup_runs": warmups,
        "scaling_runs": extra,
    }
    write_json(args.out, results)
    log(f"\nresults: {args.out}  (total {results['total_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
