"""MuJoCo through Gymnasium: heron SAC and TD3 beside Stable-Baselines3 and SBX at equal
work, and heron's host loop against its update rate alone.

Usage (from the repository root)::

    .venv/bin/python benchmarks/mujoco.py [--sections host,equal] [--quick]
        [--envs HalfCheetah-v5,Hopper-v5] [--systems sb3,sbx,heron] [--algos sac,td3]
        [--seeds 0,1,2] [--steps 300000]
        [--at 100000,300000] [--out PATH] [--runs-dir DIR] [--reuse] [--wait-idle S]
        [--timeout S]

Every figure comes from a fresh subprocess; timings are printed and stored, never asserted.

``host``: heron SAC on ``gym:HalfCheetah-v5`` at one env and one update per env step
(``--num-envs 1``, SAC's defaults: 256x256 networks, batches of 256): env steps/s once
the updates have begun, from ``metrics.jsonl``; then the same SAC learning alone, from a
dataset collected by that run (``heron collect``, then ``heron train sac --dataset``):
updates/s. Both runs are made twice, alternating, and the medians kept. Target: the
first at least 90% of the second (the Gymnasium host loop is not the bottleneck). Then, in
one process so that a machine whose speed drifts slows both alike
(``_host_interleaved.py``): SAC's time per update at one and at 50 updates per env step,
timed alternately, on ``gymnax:Pendulum-v1`` (compiled: no host callback),
``gym:Pendulum-v1`` and ``gym:HalfCheetah-v5``.

``equal``: on each of ``--envs``, for each seed, SB3 SAC and TD3 (torch CPU, one thread),
SBX SAC and TD3 and heron SAC and TD3 with the rl-baselines3-zoo MuJoCo hyperparameters
(``_peers/sb3_mujoco.py`` lists them): one env, one update per env step, 10,000 random
steps before learning, SAC 256x256 / TD3 400x300 networks, batches of 256, the same
learning rates, replay of 1M. heron is given the same values by flag (``EQUAL_FLAGS``),
not its presets. Greedy evaluation every ``EVAL_EVERY`` steps over ``EVAL_EPISODES``
episodes. Reported: steps/s (evaluation time excluded; heron's after compilation),
whole-process time, greedy return at each of ``--at`` (mean +- standard error over the
seeds), and the ratios heron / SB3 and heron / SBX of steps/s (targets: SAC >= 1.8x SB3
and >= 1.2x SBX).

heron's MuJoCo presets (``gym:<env>`` in heron/presets/*.toml) are measured beside the
zoo's published 1M-step returns by ``benchmarks/presets.py`` (e.g. ``--only
sac/gym:HalfCheetah-v5,td3/gym:HalfCheetah-v5 --seeds 1``), as every preset is.

The peer venvs (``benchmarks/.venvs/sb3``, ``.venvs/sbx``) are made on first use from
``_peers/sb3-requirements.txt`` and ``_peers/sbx-requirements.txt``. Results go to
``--out`` (default ``benchmarks/results/mujoco.json``); each finished equal-work run also
goes to ``--runs-dir`` (default ``benchmarks/recorded/mujoco_equal_runs``, kept in git, so
a table made over several sittings survives a fresh machine; each record names its CPU
(model name and family/model/stepping), the machine's boot, its cores and commit, and the
time of a fixed matmul before and after it (``speed_probe``); a table whose runs name
different CPUs or boots is printed with a warning: VMs named alike ran the same work at
half or twice the speed here), and ``--reuse`` reads the runs recorded there instead of
running them again. The full table (3 seeds, 300k steps, two envs) is about 36 runs of
40-95 min here (SB3 SAC: 94 min); it is made in two streams, each pinned to one core,
which stay equal work (SB3 uses one thread; heron and SBX get one core each too), e.g.::

    taskset -c 0 .venv/bin/python benchmarks/mujoco.py --sections equal --reuse \
        --envs HalfCheetah-v5 --out benchmarks/results/mujoco_c0.json
    taskset -c 1 .venv/bin/python benchmarks/mujoco.py --sections equal --reuse \
        --envs Hopper-v5 --out benchmarks/results/mujoco_c1.json

and once every run is recorded, ``--reuse`` with all envs prints the whole table. A run
pinned to a core is flagged as disturbed by load on that core only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _harness import SetupError
from pendulum import heron_curve, read_metrics
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
PEERS = ROOT / "benchmarks" / "_peers"

EVAL_EVERY = 10_000  # env steps between greedy evaluations
EVAL_EPISODES = 5
LEARNING_STARTS = 10_000  # the zoo's, for every MuJoCo env
SAVE_EVERY = 10_000  # heron's checkpoints, in iterations (= env steps at one env)
SAC_TARGETS = {"sb3": 1.8, "sbx": 1.2}  # heron SAC steps/s over theirs, at equal work
HOST_TARGET = 0.9  # heron SAC steps/s at one env over its update rate alone
# heron's flags for the zoo's settings (its defaults are SB3's otherwise).
EQUAL_FLAGS = {
    "sac": (
        "--sac.replay.min-size", str(LEARNING_STARTS), "--sac.replay.capacity", "1000000",
    ),
    "td3": (
        "--td3.replay.min-size", str(LEARNING_STARTS), "--td3.replay.capacity", "1000000",
        "--td3.network.hidden-sizes", "400", "300",
    ),
}  # fmt: skip


def heron_flags(run_dir: Path, seed: int, checkpoints: bool = True) -> list[str]:
    """The run directory, seed, greedy evaluation and checkpoints of a heron run: every
    ``SAVE_EVERY`` steps as its MuJoCo presets (the default, every 100 iterations, is every
    100 steps at one env), or none."""
    saves = ["--save-every-n", str(SAVE_EVERY)] if checkpoints else ["--no-checkpoints"]
    return [
        "--run-dir", str(run_dir), "--seed", str(seed), "--n-evals", str(EVAL_EPISODES),
        "--eval-temperatures", "0", *saves,
    ]  # fmt: skip


def heron_train(
    args, name: str, argv: list[str], cold_cache: bool = False
) -> tuple[dict | None, dict, list[dict]]:
    """(final JSON line, the process record, metrics.jsonl's lines) of one heron run;
    ``cold_cache``: with an empty compilation cache of its own (its whole-process time then
    includes every compilation, as a first run's does)."""
    run_dir = Path(argv[argv.index("--run-dir") + 1])
    cache = run_dir.with_name(run_dir.name + ".jax-cache")
    for path in (run_dir, cache):
        if path.exists():
            shutil.rmtree(path)
    env = {"HERON_COMPILE_CACHE": str(cache)} if cold_cache else None
    runs: dict[str, Any] = {}
    payload = record_run(runs, name, name, measure(argv, args, env=env))
    metrics = run_dir / "metrics.jsonl"
    return payload, runs[name], read_metrics(metrics) if metrics.exists() else []


def rate_after(entries: list[dict], start_step: int, key: str = "step") -> float | None:
    """Steps (or, offline, updates) per second between the first train line at or after
    ``start_step`` and the last one, leaving out the time of the evaluations between them
    (each from the train line of its step to its own line) but not the host's other work
    (train lines, checkpoints): SB3's ``steps / (learn time - evaluation time)``."""
    train = [e for e in entries if e.get("kind") == "train" and e["step"] >= start_step]
    if len(train) < 2:
        return None
    first, last = train[0], train[-1]
    line_at = {e["step"]: e["wall_s"] for e in train}
    evaluations = {e["step"]: e["wall_s"] for e in entries if e.get("kind") == "eval"}
    eval_s = sum(
        wall - line_at[step]
        for step, wall in evaluations.items()
        if step in line_at and first["step"] <= step < last["step"]
    )
    return (last[key] - first[key]) / (last["wall_s"] - first["wall_s"] - eval_s)


# --------------------------------------------------------------------------- host


def bench_host(args, work: Path) -> dict[str, Any]:
    """heron SAC at one env and one update per step, beside its updates alone."""
    steps = 4_000 if args.quick else 8_000
    starts = 1_000
    online, offline, records = [], [], {}
    for attempt in range(1 if args.quick else 2):
        run_dir = work / f"host_online_{attempt}"
        argv = [
            str(args.heron), "train", "sac", "--env", "gym:HalfCheetah-v5", "--preset", "none",
            "--steps", str(steps), "--num-envs", "1", "--eval-every-n", str(10 * steps),
            *heron_flags(run_dir, 0),
            "--sac.replay.min-size", str(starts),
        ]  # fmt: skip
        payload, records[f"online_{attempt}"], entries = heron_train(args, "host online", argv)
        if payload is None:
            return {"records": records, "error": "the online run failed"}
        online.append(rate_after(entries, 2 * starts))
        data = work / f"host_data_{attempt}"
        if data.exists():
            shutil.rmtree(data)
        collect = [str(args.heron), "collect", str(run_dir), "--episodes", "5", "--out", str(data)]
        runs: dict[str, Any] = {}
        if record_run(runs, "collect", "host collect", measure(collect, args)) is None:
            return {"records": {**records, **runs}, "error": "heron collect failed"}
        off_dir = work / f"host_offline_{attempt}"
        argv = [
            str(args.heron), "train", "sac", "--env", "gym:HalfCheetah-v5", "--dataset",
            str(data), "--steps", str(steps), "--updates-per-iteration", "500",
            "--eval-every-n", "1000", *heron_flags(off_dir, 0, checkpoints=False),
        ]  # fmt: skip
        payload, records[f"offline_{attempt}"], entries = heron_train(args, "host alone", argv)
        if payload is None:
            return {"records": records, "error": "the offline run failed"}
        offline.append(rate_after(entries, 1_000))
    steps_per_s, updates_per_s = statistics.median(online), statistics.median(offline)
    python = args.heron.parent / "python"
    rounds = ["--rounds", "4" if args.quick else "8"]
    # -P: the script's folder (which holds this mujoco.py) must not shadow the mujoco package
    interleaved = [str(python), "-P", str(ROOT / "benchmarks" / "_host_interleaved.py"), *rounds]
    alternating = record_run(records, "interleaved", "host interleaved", measure(interleaved, args))
    disturbed = any(other_load(r) > BUSY_WARNING for r in records.values())
    return {
        "env_steps_per_s": online,
        "updates_per_s_alone": offline,
        "ratio": steps_per_s / updates_per_s,
        "interleaved": alternating,
        "target": HOST_TARGET,
        "disturbed": disturbed,
        "records": records,
    }


def format_host(host: dict[str, Any]) -> str:
    if "error" in host:
        return f"host loop: {host['error']}"
    online = ", ".join(f"{v:.0f}" for v in host["env_steps_per_s"])
    alone = ", ".join(f"{v:.0f}" for v in host["updates_per_s_alone"])
    mark = " (* other load during the runs)" if host["disturbed"] else ""
    lines = [
        "host loop, heron SAC on gym:HalfCheetah-v5, one env, one update per step:",
        f"  env steps/s with updates: {online}; updates/s alone: {alone}",
        f"  ratio {host['ratio']:.2f} (target >= {host['target']:.2f}){mark}",
    ]
    if host.get("interleaved"):
        lines.append("  in one process, alternately (min ms per update at 1 and at 50 per step):")
        for row in host["interleaved"]["rows"]:
            one, fifty = row["ms_per_update_at_1"]["min"], row["ms_per_update_at_50"]["min"]
            lines.append(f"    {row['env']:<22} {one:6.2f} {fifty:6.2f}  ratio {row['ratio']:.2f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- equal work


def equal_heron(args, work: Path, algo: str, env: str, seed: int) -> dict[str, Any]:
    run_dir = work / f"equal_heron_{algo}_{env}_s{seed}"
    argv = [
        str(args.heron), "train", algo, "--env", f"gym:{env}", "--preset", "none",
        "--steps", str(args.steps), "--num-envs", "1", "--eval-every-n", str(EVAL_EVERY),
        *heron_flags(run_dir, seed),
        *EQUAL_FLAGS[algo],
    ]  # fmt: skip
    payload, record, entries = heron_train(args, f"heron {algo} {env} s{seed}", argv, True)
    if payload is None:
        return {"record": record}
    curve = heron_curve(entries, 0.0)
    return {
        "record": record,
        # from its first train line (after compiling) on, evaluations left out, as SB3's
        "steps_per_s": rate_after(entries, 0),
        "steps_per_s_in_programs": payload.get("steps_per_s_after_compile"),
        "whole_s": record["wall_s"],
        "curve": [{"step": e["step"], "return_mean": e["return_mean"]} for e in curve],
    }


def equal_peer(args, library: str, algo: str, env: str, seed: int) -> dict[str, Any]:
    try:
        python = prepare_peer(library)
    except SetupError as exc:
        log(f"  {library}: could not prepare its venv: {exc}")
        return {"error": f"venv: {exc}"}
    argv = [
        str(python), str(PEERS / "sb3_mujoco.py"), "--library", library, "--algo", algo,
        "--env", env, "--mode", "eval", "--steps", str(args.steps), "--seed", str(seed),
        "--eval-every", str(EVAL_EVERY), "--eval-episodes", str(EVAL_EPISODES),
        "--learning-starts", str(LEARNING_STARTS),
    ]  # fmt: skip
    runs: dict[str, Any] = {}
    payload = record_run(runs, "run", f"{library} {algo} {env} s{seed}", measure(argv, args))
    record = runs["run"]
    if payload is None:
        return {"record": record}
    return {
        "record": record,
        "steps_per_s": payload["steps_per_s_excluding_eval"],
        "whole_s": record["wall_s"],
        "curve": [{"step": e["step"], "return_mean": e["return_mean"]} for e in payload["evals"]],
    }


def return_at(curve: list[dict], step: int) -> float | None:
    """The greedy return of the evaluation at ``step`` (the last one at or before it)."""
    before = [e for e in curve if e["step"] <= step]
    if not before or step - before[-1]["step"] >= EVAL_EVERY:
        return None
    return before[-1]["return_mean"]


def mean_se(values: list[float | None]) -> tuple[float | None, float | None]:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return None, None
    mean = statistics.fmean(kept)
    se = statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else None
    return mean, se


def speed_probe(repeats: int = 5, products: int = 50) -> float:
    """Milliseconds for ``products`` float32 256x256 matrix products in numpy on this
    process's cores (the fastest of ``repeats``): how fast the machine runs at this moment,
    recorded beside each run because VMs reporting the same CPU model have run the same
    work at half or twice the speed here."""
    import numpy as np

    matrix = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    fastest = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(products):
            matrix @ matrix
        fastest = min(fastest, time.perf_counter() - start)
    return fastest * 1e3


def equal_run(args, work: Path, system: str, algo: str, env: str, seed: int) -> dict[str, Any]:
    """One equal-work run; with ``--reuse``, read from ``--runs-dir`` when a run with the same
    system, algorithm, env, seed and steps finished there before. Every finished run is
    written there (with the cores it was pinned to and the commit), so a table too long for
    one sitting is completed over several, and two streams pinned to different cores
    (``taskset -c 0 ...`` and ``taskset -c 1 ...`` with different ``--out``) share it."""
    path = args.runs_dir / f"{system}_{algo}_{env}_s{seed}_{args.steps}.json"
    if args.reuse and path.exists():
        log(f"  {system} {algo} {env} s{seed}: recorded in {path}")
        return json.loads(path.read_text())
    probe_before = speed_probe()
    if system == "heron":
        run = equal_heron(args, work, algo, env, seed)
    else:
        run = equal_peer(args, system, algo, env, seed)
    if run.get("curve"):
        run["cores"] = sorted(os.sched_getaffinity(0))
        run["processor"] = args.processor
        run["cpu_generation"] = args.cpu_generation
        run["boot_id"] = args.boot_id
        run["probe_ms"] = [probe_before, speed_probe()]  # before and after the run
        run["git_commit"] = args.commit
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run, indent=1))
    return run


def bench_equal(args, work: Path) -> list[dict[str, Any]]:
    rows = []
    for env in args.envs:
        for algo in args.algos:
            for system in args.systems:
                runs = [equal_run(args, work, system, algo, env, seed) for seed in args.seeds]
                row = {"env": env, "algo": algo, "system": system, "runs": runs}
                row["steps_per_s"] = mean_se([r.get("steps_per_s") for r in runs])
                row["whole_s"] = mean_se([r.get("whole_s") for r in runs])
                row["returns"] = {
                    str(at): mean_se([return_at(r.get("curve", []), at) for r in runs])
                    for at in args.at
                }
                row["disturbed"] = any(
                    other_load(r["record"]) > BUSY_WARNING for r in runs if "record" in r
                )
                rows.append(row)
    processors = {
        f"{r.get('processor', 'not recorded')} ({r.get('cpu_generation', 'family unknown')})"
        for row in rows
        for r in row["runs"]
    }
    if len(processors) > 1:
        log(f"warning: the runs of this table ran on different CPUs: {sorted(processors)}")
    boots = {r.get("boot_id") for row in rows for r in row["runs"]}
    if len(boots) > 1:
        log(
            f"warning: the runs of this table come from {len(boots)} starts of the machine "
            "(boot ids; None: not recorded): VMs reporting the same CPU have run the same "
            "work at half or twice the speed here, so compare rows made in one start (each "
            "record's probe_ms times a fixed matmul before and after its run)"
        )
    return rows


def fmt_mean_se(pair: tuple[float | None, float | None], spec: str = ".0f") -> str:
    mean, se = pair
    if mean is None:
        return "-"
    return format(mean, spec) + ("" if se is None else f" +- {format(se, spec)}")


def equal_ratios(rows: list[dict]) -> list[dict[str, Any]]:
    """heron's steps/s over each peer's, per env and algorithm (none where heron's runs
    are not among ``rows``, e.g. ``--systems sbx``)."""
    ratios = []
    for row in rows:
        heron = next(
            (r for r in rows if r["system"] == "heron" and r["env"] == row["env"]
             and r["algo"] == row["algo"]),
            None,
        )  # fmt: skip
        if row["system"] == "heron" or heron is None:
            continue
        value = ratio(heron["steps_per_s"][0], row["steps_per_s"][0])
        target = SAC_TARGETS.get(row["system"]) if row["algo"] == "sac" else None
        ratios.append({"env": row["env"], "algo": row["algo"], "over": row["system"],
                       "ratio": value, "target": target})  # fmt: skip
    return ratios


def format_equal(rows: list[dict], ratios: list[dict], at: list[int]) -> str:
    header = ["env", "algo", "system", "steps/s", "whole s"] + [f"return @{a:,}" for a in at]
    table = [header]
    for row in rows:
        mark = "*" if row["disturbed"] else ""
        table.append(
            [row["env"], row["algo"], row["system"] + mark, fmt_mean_se(row["steps_per_s"]),
             fmt_mean_se(row["whole_s"])]
            + [fmt_mean_se(row["returns"][str(a)]) for a in at]
        )  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    lines.append("(mean +- s.e. over seeds; * other load during a run)")
    for r in ratios:
        value = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        target = "" if r["target"] is None else f" (target >= {r['target']:g}x)"
        lines.append(f"heron {r['algo']} / {r['over']} steps/s on {r['env']}: {value}{target}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="host,equal")
    parser.add_argument("--quick", action="store_true", help="short runs: 20k steps, one seed")
    parser.add_argument("--envs", default="HalfCheetah-v5,Hopper-v5")
    parser.add_argument("--systems", default="sb3,sbx,heron")
    parser.add_argument("--algos", default="sac,td3", help="of the equal-work section")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=300_000, help="env steps of each run")
    parser.add_argument("--at", default="100000,300000", help="steps to report returns at")
    parser.add_argument("--heron", type=Path, default=ROOT / ".venv" / "bin" / "heron")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/mujoco.json")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=ROOT / "benchmarks/recorded/mujoco_equal_runs",
        help="where each finished equal-work run is recorded (in git by default)",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="read runs recorded in --runs-dir, not rerun them"
    )
    parser.add_argument("--wait-idle", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=6 * 3600.0, help="per process, s")
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = set(args.sections) - {"host", "equal"}
    if unknown:
        parser.error(f"unknown --sections {sorted(unknown)}; valid: host, equal")
    args.envs = [e for e in args.envs.split(",") if e]
    args.systems = [s for s in args.systems.split(",") if s]
    args.algos = [a for a in args.algos.split(",") if a]
    unknown = set(args.algos) - {"sac", "td3"}
    if unknown:
        parser.error(f"unknown --algos {sorted(unknown)}; valid: sac, td3")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.at = [int(a) for a in args.at.split(",") if a]
    if args.quick:
        args.steps, args.at, args.seeds = 20_000, [20_000], args.seeds[:1]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    work = reset_dir(args.out.parent / f"{args.out.stem}_runs")  # one per --out: streams
    machine = machine_info()
    args.commit = machine["git_commit"]
    args.processor = machine["processor"]
    args.cpu_generation = machine["cpu_generation"]
    args.boot_id = machine["boot_id"]
    results: dict[str, Any] = {"benchmark": "mujoco", "quick": args.quick,
                               "machine": machine, "args": {
                                   k: str(v) if isinstance(v, Path) else v
                                   for k, v in vars(args).items()}}  # fmt: skip
    report = []
    if "host" in args.sections:
        log("host loop: heron SAC on gym:HalfCheetah-v5 at one env")
        results["host"] = bench_host(args, work)
        report.append(format_host(results["host"]))
    if "equal" in args.sections:
        log(f"equal work: {', '.join(args.envs)}, {args.steps:,} steps, seeds {args.seeds}")
        rows = bench_equal(args, work)
        ratios = equal_ratios(rows)
        results["equal"] = {"rows": rows, "ratios": ratios, "eval_every": EVAL_EVERY,
                            "eval_episodes": EVAL_EPISODES}  # fmt: skip
        report.append(format_equal(rows, ratios, args.at))
    results["total_wall_s"] = time.perf_counter() - started
    log("\n" + "\n\n".join(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    log(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
