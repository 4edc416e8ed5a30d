"""Offline CRR: heron against d3rlpy on the same Minari dataset, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/offline_crr.py [--dataset DIR] [--updates N] [--quick]
                                               [--out PATH] [--wait-idle S]

Without ``--dataset`` a medium Pendulum dataset is made first: heron SVG0 trained online on
gymnax Pendulum-v1 (``MEDIUM_ONLINE_STEPS`` env steps, ``--reward-scale 0.1``, the settings
of its learning test), then ``heron collect`` of ``DATASET_EPISODES`` episodes of its
behaviour policy (the dataset of tests/test_offline.py's learning test). Then, each in a
fresh subprocess:

* heron CRR from the dataset (``heron train crr --dataset``), its defaults, rewards scaled
  by 0.1 for the learner so values fit its default atoms, greedy evaluation on gymnax
  Pendulum-v1 at the end;
* d3rlpy CRR (``d3rlpy.algos.CRRConfig()`` defaults, torch CPU) in
  ``benchmarks/.venvs/d3rlpy`` via ``_peers/d3rlpy_crr.py``, reading the same dataset with
  minari, greedy evaluation on Gymnasium Pendulum-v1.

Both take ``--updates`` gradient steps, each on mini-batches of its own default size (heron
256 transitions, d3rlpy 100). The script prints whole-process wall time, updates/s and
final greedy return for each, and heron's updates/s over d3rlpy's. Timings are reported,
never asserted. Results go to ``--out`` (default ``benchmarks/results/offline_crr.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _harness import SetupError
from ppo_cartpole import BUSY_WARNING, log, machine_info, measure, other_load, prepare_peer

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"
RESULTS = BENCH / "results"
WORK = RESULTS / "offline_crr"

MEDIUM_ONLINE_STEPS = 10_000
DATASET_EPISODES = 200
# The behaviour policy: SVG0 with the settings of its learning test (tests/test_svg0.py),
# stopped part-way (D4RL's "medium" recipe), as in tests/test_offline.py.
SVG0_FLAGS = (
    "--svg0.network.hidden-sizes", "64", "64", "--svg0.batch-size", "32",
    "--svg0.replay.ratio", "0.5", "--svg0.policy-learning-rate", "3e-4",
    "--svg0.critic-learning-rate", "3e-4", "--svg0.prior-learning-rate", "3e-4",
)  # fmt: skip
EVAL_EPISODES = 32
UPDATES = 10_000


def heron_cli(args) -> str:
    return str(Path(args.heron))


def make_dataset(args) -> tuple[Path, dict | None]:
    """A medium Pendulum dataset from a briefly trained heron SVG0 run."""
    import shutil

    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    online = WORK / "online"
    argv = [
        heron_cli(args), "train", "svg0", "--env", "gymnax:Pendulum-v1",
        "--steps", str(args.online_steps), "--num-envs", "16", "--reward-scale", "0.1",
        "--seed", str(args.seed), "--eval-temperatures", "0", "--eval-every-n", "100000",
        "--run-dir", str(online), *SVG0_FLAGS,
    ]  # fmt: skip
    child = measure(argv, args)
    if not child.ok:
        raise SystemExit(f"online run failed: {child.error}\n{child.stderr_tail}")
    log(f"  online SVG0 {args.online_steps} steps: greedy {child.payload['final_eval_return']:.1f}")
    dataset = WORK / "pendulum-medium"
    argv = [
        heron_cli(args), "collect", str(online), "--episodes", str(DATASET_EPISODES),
        "--out", str(dataset), "--seed", str(args.seed),
    ]  # fmt: skip
    child = measure(argv, args)
    if not child.ok:
        raise SystemExit(f"collect failed: {child.error}\n{child.stderr_tail}")
    return dataset, child.payload


def bench_heron(dataset: Path, args) -> dict:
    run_dir = WORK / "heron_run"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    argv = [
        heron_cli(args), "train", "crr", "--dataset", str(dataset), "--env", "gymnax:Pendulum-v1",
        "--steps", str(args.updates), "--updates-per-iteration", str(args.updates // 4),
        "--reward-scale", "0.1", "--seed", str(args.seed), "--eval-temperatures", "0",
        "--n-evals", str(EVAL_EPISODES), "--run-dir", str(run_dir),
    ]  # fmt: skip
    return timed("heron CRR ", argv, args)


def bench_d3rlpy(dataset: Path, args) -> dict:
    try:
        python = prepare_peer("d3rlpy")
    except SetupError as exc:
        log(f"  d3rlpy skipped: could not prepare its venv: {exc}")
        return {"error": f"venv setup failed: {exc}"}
    argv = [
        str(python), str(PEERS / "d3rlpy_crr.py"), "--dataset", str(dataset),
        "--updates", str(args.updates), "--seed", str(args.seed),
        "--eval-episodes", str(EVAL_EPISODES), "--torch-threads", str(args.torch_threads),
    ]  # fmt: skip
    return timed("d3rlpy CRR", argv, args)


def timed(label: str, argv: list[str], args) -> dict:
    """Runs one training process and logs its wall time and final return."""
    child = measure(argv, args)
    if child.ok:
        log(f"  {label}  {child.wall_s:8.1f} s  final {child.payload['final_eval_return']:.1f}")
    else:
        log(f"  {label}  FAILED ({child.error})\n{child.stderr_tail}")
    return child.to_json()


def table(dataset_info: dict | None, heron: dict, d3rlpy: dict, updates: int) -> None:
    def cell(record, key, fmt="{:.1f}"):
        result = record.get("result") or {}
        value = result.get(key)
        return fmt.format(value) if isinstance(value, int | float) else "-"

    heron_rate = (heron.get("result") or {}).get("steps_per_s_after_compile")
    d3_rate = (d3rlpy.get("result") or {}).get("updates_per_s")
    log("")
    if dataset_info:
        log(
            f"dataset: {dataset_info['episodes']} episodes, {dataset_info['steps']} steps, "
            f"return {dataset_info['return_mean']:.1f} +- {dataset_info['return_std']:.1f}"
        )
    log(f"{'system':<12} {'updates':>8} {'process s':>10} {'updates/s':>10} {'final return':>13}")
    for name, record, rate in (("heron CRR", heron, heron_rate), ("d3rlpy CRR", d3rlpy, d3_rate)):
        wall = record.get("wall_s")
        marker = "*" if record and other_load(record) > BUSY_WARNING else ""
        log(
            f"{name + marker:<12} {updates:>8} {wall if wall is None else round(wall, 1)!s:>10} "
            f"{'-' if rate is None else round(rate, 1)!s:>10} "
            f"{cell(record, 'final_eval_return'):>13}"
        )
    if heron_rate and d3_rate:
        log(
            f"heron updates/s over d3rlpy's (after compilation / inside fit): "
            f"{heron_rate / d3_rate:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="an existing Minari dataset (default: make one)")
    parser.add_argument("--updates", type=int, default=UPDATES, help="gradient steps each")
    parser.add_argument("--online-steps", type=int, default=MEDIUM_ONLINE_STEPS)
    parser.add_argument("--quick", action="store_true", help="2,000 updates each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heron", default=str(ROOT / ".venv" / "bin" / "heron"))
    parser.add_argument("--torch-threads", type=int, default=0, help="d3rlpy: 0 = default")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per process, s")
    parser.add_argument("--wait-idle", type=float, default=0.0)
    parser.add_argument("--out", default=str(RESULTS / "offline_crr.json"))
    args = parser.parse_args()
    if args.quick:
        args.updates = 2_000
    if args.dataset:
        from heron.offline import read_dataset

        dataset = Path(args.dataset)
        dataset_info = read_dataset(dataset).summary()
        WORK.mkdir(parents=True, exist_ok=True)
    else:
        log("[dataset] medium Pendulum from a briefly trained heron SVG0")
        dataset, dataset_info = make_dataset(args)
    log(f"\n[train] {args.updates} updates each on {dataset}")
    heron = bench_heron(dataset, args)
    d3rlpy = bench_d3rlpy(dataset, args)
    table(dataset_info, heron, d3rlpy, args.updates)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "dataset_info": dataset_info,
                "updates": args.updates,
                "heron": heron,
                "d3rlpy": d3rlpy,
                "machine": machine_info(),
            },
            indent=2,
        )
    )
    log(f"results: {out}")


if __name__ == "__main__":
    sys.exit(main())
