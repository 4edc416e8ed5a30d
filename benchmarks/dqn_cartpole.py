"""DQN on CartPole-v1: heron against Stable-Baselines3, SBX and rejax, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/dqn_cartpole.py [--systems heron,rejax,sb3,sbx]
                                                [--steps N] [--out PATH] [--wait-idle S]

Every measurement is a fresh subprocess, so whole-process times include interpreter
start-up, imports and compilation:

* heron DQN through its CLI (``heron train dqn``) on gymnax CartPole-v1 with the preset a
  user gets (``heron/presets/dqn.toml``), on an empty JAX compilation cache;
* rejax 0.1.3 DQN (gymnax 0.0.9, jit-compiled) in ``benchmarks/.venvs/rejax`` with the
  ``dqn`` entry of rejax's CartPole config (``_peers/rejax_dqn.py``);
* SB3 DQN (torch CPU, one thread, one env) in ``benchmarks/.venvs/sb3`` and SBX DQN
  (sbx-rl, SB3's API on JAX) in ``benchmarks/.venvs/sbx``, both with rl-baselines3-zoo's
  CartPole-v1 hyperparameters (``_peers/sb3_dqn.py --library sb3|sbx``).

Measures per system: steps/s after compilation (heron: ``steps_per_s_after_compile``;
rejax: a second call of the compiled train function; SB3/SBX: steps over ``learn()``
time), whole-process seconds of a run without evaluation (heron's include its own
evaluations), and the first env step at which a greedy evaluation reaches 475. Targets
(issue 11): heron's steps/s >= rejax's, and heron's steps to 475 no worse than SB3's.
Peer venvs are created on first use from ``_peers/*-requirements.txt``; a peer whose venv
cannot be made is reported and skipped. Timings are reported, never asserted. Results go
to ``--out`` as JSON (default ``benchmarks/results/dqn_cartpole.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _harness import SetupError
from ppo_cartpole import (
    first_solved,
    greedy_evals,
    log,
    machine_info,
    measure,
    prepare_peer,
    ratio,
    record_run,
    reset_dir,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"

STEPS = 100_000
SOLVED_RETURN = 475.0
EVAL_EVERY = 5_000  # peers: env steps between greedy evaluations
EVAL_EPISODES = 8
SYSTEMS = ("heron", "rejax", "sb3", "sbx")
# peer -> (venv, script, extra arguments, modes to run in order)
PEERS_RUN = {
    "rejax": ("rejax", "rejax_dqn.py", [], ("whole", "throughput", "eval")),
    "sb3": ("sb3", "sb3_dqn.py", ["--library", "sb3"], ("whole", "eval")),
    "sbx": ("sbx", "sb3_dqn.py", ["--library", "sbx"], ("whole", "eval")),
}


def bench_peer(name: str, args) -> dict[str, Any]:
    """Every measurement of one peer: {"runs": {mode: record}, summary fields...}."""
    venv, script, extra, modes = PEERS_RUN[name]
    log(f"\n[{name}]")
    try:
        python = prepare_peer(venv)
    except SetupError as error:
        log(f"  skipped: could not prepare its venv: {error}")
        return {"status": "skipped", "reason": str(error), "runs": {}}
    runs: dict[str, Any] = {}
    for mode in modes:
        argv = [
            str(python), str(PEERS / script), *extra, "--mode", mode, "--steps",
            str(args.steps), "--seed", str(args.seed), "--eval-every", str(EVAL_EVERY),
            "--eval-episodes", str(EVAL_EPISODES), "--solved-return", str(SOLVED_RETURN),
        ]  # fmt: skip
        record_run(runs, mode, f"{mode} {args.steps:,} steps", measure(argv, args))
    result = {mode: (runs[mode].get("result") or {}) for mode in runs}
    rate_mode = "throughput" if "throughput" in runs else "whole"
    return {
        "status": "ok" if all("error" not in r for r in runs.values()) else "partial",
        "steps_per_s": result.get(rate_mode, {}).get("steps_per_s"),
        "whole_s": runs["whole"]["wall_s"]
        if "error" not in runs.get("whole", {"error": 1})
        else None,
        "steps_to_solved": result.get("eval", {}).get("steps_to_solved"),
        "final_eval_return": result.get("eval", {}).get("final_eval_return"),
        "updates_per_1k_steps": result.get("whole", {}).get("updates_per_1k_steps"),
        "runs": runs,
    }


def bench_heron(args) -> dict[str, Any]:
    """``heron train dqn`` on gymnax CartPole-v1 with its preset, on an empty compile cache."""
    log(f"\n[heron] {args.heron}")
    work = args.out.parent / "heron_dqn_runs"
    run_dir = work / "gymnax_preset"
    cache = reset_dir(work / "jax-cache")
    if run_dir.exists():
        reset_dir(run_dir)
    argv = [
        str(args.heron), "train", "dqn", "--env", "gymnax:CartPole-v1", "--steps",
        str(args.steps), "--seed", str(args.seed), "--run-dir", str(run_dir),
    ]  # fmt: skip
    runs: dict[str, Any] = {}
    payload = record_run(
        runs,
        "preset",
        f"preset {args.steps:,} steps",
        measure(argv, args, env={"HERON_COMPILE_CACHE": str(cache)}),
    )
    if payload is None:
        return {"status": "failed", "runs": runs}
    evals = greedy_evals(Path(payload.get("run_dir") or run_dir) / "metrics.jsonl")
    config = json.loads((run_dir / "config.json").read_text())
    dqn, run = config.get("dqn", {}), config.get("run", {})
    replay = dqn.get("replay", {})
    return {
        "status": "ok",
        "steps_per_s": payload.get("steps_per_s_after_compile"),
        "steps_per_s_end_to_end": payload.get("steps_per_s"),
        "whole_s": runs["preset"]["wall_s"],
        "steps_to_solved": first_solved(evals),
        "final_eval_return": payload.get("final_eval_return"),
        "best_eval_return": payload.get("best_eval_return"),
        "updates_per_1k_steps": 1000 * replay.get("ratio", 0.0) if replay else None,
        "num_envs": run.get("num_envs"),
        "greedy_evals": evals,
        "runs": runs,
    }


def fmt(value, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def report(results: dict[str, dict], steps: int) -> str:
    header = ("system", "status", "steps/s", "whole s", f"steps to greedy>={SOLVED_RETURN:g}")
    rows = []
    for system, r in results.items():
        solved = r.get("steps_to_solved")
        reached = fmt(solved) if solved is not None else f"> {steps:,}"
        if r.get("status") in ("skipped", "failed"):
            reached = "-"
        rows.append(
            (system, r["status"], fmt(r.get("steps_per_s")), fmt(r.get("whole_s"), ".1f"), reached)
        )
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    heron = results.get("heron", {})
    lines.append("")
    for peer in ("rejax", "sb3", "sbx"):
        if peer not in results:
            continue
        rate = ratio(heron.get("steps_per_s"), results[peer].get("steps_per_s"))
        whole = ratio(heron.get("whole_s"), results[peer].get("whole_s"))
        lines.append(
            f"heron / {peer}: steps/s {fmt(rate, '.2f')}x (higher is better), whole-process "
            f"time {fmt(whole, '.2f')}x (lower is better)"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "dqn_cartpole.json")
    parser.add_argument("--heron", default=str(ROOT / ".venv" / "bin" / "heron"), help="heron CLI")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per process")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS")
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
    log(f"DQN CartPole-v1 benchmark, {args.steps:,} steps, seed {args.seed}")
    results: dict[str, dict] = {}
    for system in args.systems:
        results[system] = bench_heron(args) if system == "heron" else bench_peer(system, args)
    table = report(results, args.steps)
    log("\n" + table)
    document = {
        "benchmark": "dqn_cartpole",
        "steps": args.steps,
        "seed": args.seed,
        "solved_return": SOLVED_RETURN,
        "peer_eval": {"every_steps": EVAL_EVERY, "episodes": EVAL_EPISODES, "greedy": True},
        "machine": machine_info(),
        "total_wall_s": time.perf_counter() - started,
        "systems": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    log(f"\nresults written to {args.out} ({document['total_wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
