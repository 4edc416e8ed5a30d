"""Offline CRR against behaviour cloning on a mixed-quality Pendulum dataset, beside d3rlpy.

Usage (from the repository root)::

    .venv/bin/python benchmarks/offline_crr.py                 # dataset, heron and d3rlpy
    .venv/bin/python benchmarks/offline_crr.py --systems heron # heron's CRR and BC only
    .venv/bin/python benchmarks/offline_crr.py --dataset DIR   # an existing Minari dataset

What CRR exists for: learning from data of mixed quality a policy better than the data's
average, where behaviour cloning copies the average. Without ``--dataset`` the dataset is
made with heron's own tools, D4RL's "medium-replay"-like recipe on Pendulum:

1. the behaviour policy: heron's SVG0 preset on gymnax Pendulum-v1 (``heron train svg0``,
   at one update per env step, ``MEDIUM_REPLAY_RATIO``) stopped early, after
   ``--online-steps`` env steps (default ``MEDIUM_ONLINE_STEPS``: part
   of the way from random, about -1200, to the preset's -150);
2. ``--medium-episodes`` episodes of its stochastic behaviour policy (``heron collect``);
3. ``--random-episodes`` episodes of uniformly random actions (``heron collect --epsilon 1``
   of the same run);
4. both written as one Minari dataset (``pendulum-mixed``; the behaviour log-probabilities
   of the medium half are dropped, since the random half has none).

Then, each system for ``--seeds`` seeds, ``--updates`` gradient steps each, on the same
data:

* heron CRR: ``heron train crr --dataset D --env gymnax:Pendulum-v1 --seeds K``, the shipped
  offline preset (``offline:gymnax:Pendulum-v1`` in heron/presets/crr.toml);
* heron BC: the same with ``--crr.policy-improvement-mode all``, CRR with every
  coefficient 1, which is how heron does behaviour cloning (maximum likelihood of the
  dataset's actions under the same policy network; the critic is trained but unused);
* d3rlpy CRR and d3rlpy BC (``d3rlpy.algos.CRRConfig()`` / ``BCConfig()``, its defaults,
  torch on CPU) in ``benchmarks/.venvs/d3rlpy`` (pinned: ``_peers/d3rlpy-requirements.txt``,
  made on first use) via ``_peers/d3rlpy_crr.py``, one process per seed, greedy evaluation
  on Gymnasium's Pendulum-v1.

Each heron seed's final parameters are evaluated greedily over ``--eval-episodes`` episodes
(``heron eval``); the table gives the mean over seeds of these returns with its standard
error (sample std / sqrt(seeds)), the mean of the best greedy evaluation during training,
whole-process wall time and updates/s, then CRR minus BC with the standard error of that
difference (sqrt(se_crr^2 + se_bc^2)): the target is a difference above two of them.
Timings are reported, never asserted. Results go to ``--out`` (default
``benchmarks/results/offline_crr.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

from _harness import SetupError
from ppo_cartpole import BUSY_WARNING, log, machine_info, measure, other_load, prepare_peer

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"
RESULTS = BENCH / "results"
WORK = RESULTS / "offline_crr"

ENV = "gymnax:Pendulum-v1"
MEDIUM_ONLINE_STEPS = 3_000  # the SVG0 preset stopped early: greedy about -800, a "medium" policy
# The replay ratio the SVG0 preset had when the figures in crr.toml were measured (now 0.5):
# at 1 update per step, 3k steps give the same medium policy as then.
MEDIUM_REPLAY_RATIO = "1.0"
MEDIUM_EPISODES = 100
RANDOM_EPISODES = 100
SEEDS = 3
UPDATES = 20_000  # the offline preset's steps (one update per step offline)
EVAL_EPISODES = 100
SYSTEMS = ("heron", "d3rlpy")


def heron(args, *argv: str) -> list[str]:
    return [args.heron, *argv]


def run_json(label: str, argv: list[str], args) -> dict:
    """Runs one process; exits with its error output if it fails."""
    child = measure(argv, args)
    if not child.ok:
        raise SystemExit(f"{label} failed ({child.error}):\n{child.stderr_tail}")
    return child.to_json()


def make_dataset(args) -> tuple[Path, dict]:
    """The mixed dataset (random and medium episodes) and its composition."""
    from heron.offline import read_dataset, write_dataset

    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    online = WORK / "online_svg0"
    record = run_json(
        "online SVG0",
        heron(args, "train", "svg0", "--env", ENV, "--steps", str(args.online_steps),
              "--svg0.replay.ratio", MEDIUM_REPLAY_RATIO, "--seed", str(args.seed),
              "--run-dir", str(online)),
        args,
    )  # fmt: skip
    log(
        f"  behaviour policy: SVG0 preset stopped at {record['result']['steps']} steps, "
        f"greedy {record['result']['final_eval_return']:.1f} ({record['wall_s']:.0f} s)"
    )
    parts = {}
    for name, episodes, flags in (
        ("medium", args.medium_episodes, []),
        ("random", args.random_episodes, ["--epsilon", "1"]),
    ):
        if episodes == 0:
            continue
        out = WORK / f"pendulum-{name}"
        argv = heron(args, "collect", str(online), "--episodes", str(episodes), "--out", str(out),
                     "--seed", str(args.seed + len(parts)), *flags)  # fmt: skip
        parts[name] = run_json(f"collect {name}", argv, args)["result"]
        log(
            f"  {name}: {parts[name]['episodes']} episodes, return "
            f"{parts[name]['return_mean']:.1f} +- {parts[name]['return_std']:.1f}"
        )
    read = {name: read_dataset(WORK / f"pendulum-{name}") for name in parts}
    first = next(iter(read.values()))
    episodes = [e._replace(extras={}) for d in read.values() for e in d.episodes]
    mixed = WORK / "pendulum-mixed"
    composition = {
        name: {k: parts[name][k] for k in ("episodes", "steps", "return_mean", "return_std")}
        for name in parts
    }
    write_dataset(
        mixed,
        episodes,
        first.observation_space,
        first.action_space,
        metadata={
            "algorithm_name": "heron svg0 (medium) + uniform random",
            "heron_env": ENV,
            "heron_online_steps": args.online_steps,
            "heron_composition": json.dumps(composition),
        },
    )
    summary = read_dataset(mixed).summary()
    log(
        f"  mixed: {summary['episodes']} episodes, {summary['steps']} steps, return "
        f"{summary['return_mean']:.1f} +- {summary['return_std']:.1f}"
    )
    return mixed, {"parts": composition, "mixed": summary, "behaviour_run": record}


def bench_heron(dataset: Path, name: str, flags: list[str], args) -> dict:
    """One heron system trained for ``args.seeds`` seeds in one program, then evaluated."""
    run_dir = WORK / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    argv = heron(args, "train", "crr", "--dataset", str(dataset), "--env", ENV,
                 "--steps", str(args.updates), "--run-dir", str(run_dir), *flags)  # fmt: skip
    argv += ["--seeds", str(args.seeds)] if args.seeds > 1 else ["--seed", "0"]
    child = measure(argv, args)
    if not child.ok:
        log(f"  {name}: FAILED ({child.error})\n{child.stderr_tail}")
        return {"error": child.error, "train": child.to_json()}
    payload = child.payload
    per_seed = payload.get("per_seed") or [payload]
    record = {
        "train": child.to_json(),
        "preset": payload.get("preset"),
        "best": [s["best_eval_return"] for s in per_seed],
        "updates_per_s": payload.get("steps_per_s_after_compile"),
        "wall_s": child.wall_s,
    }
    evaluation = measure(
        heron(args, "eval", str(run_dir), "--episodes", str(args.eval_episodes)), args
    )
    if evaluation.ok:
        per_seed_eval = evaluation.payload.get("per_seed") or [evaluation.payload]
        record["final"] = [s["return_mean"] for s in per_seed_eval]
    else:  # the training's own last evaluation (the preset's n_evals episodes)
        log(f"  {name}: heron eval failed ({evaluation.error}); using the last training eval")
        record["final"] = [s["final_eval_return"] for s in per_seed]
    log(f"  {name}: {child.wall_s:.0f} s, final {fmt_se(record['final'])}")
    return record


def bench_d3rlpy(dataset: Path, algo: str, args) -> dict:
    """d3rlpy's ``algo`` (crr or bc), one process per seed."""
    try:
        python = prepare_peer("d3rlpy")
    except SetupError as exc:
        log(f"  d3rlpy skipped: could not prepare its venv: {exc}")
        return {"error": f"venv setup failed: {exc}"}
    runs, final, rates, walls = [], [], [], []
    for seed in range(args.seeds):
        argv = [
            str(python), str(PEERS / "d3rlpy_crr.py"), "--algo", algo, "--dataset", str(dataset),
            "--updates", str(args.updates), "--seed", str(seed),
            "--eval-episodes", str(args.eval_episodes), "--torch-threads", str(args.torch_threads),
        ]  # fmt: skip
        child = measure(argv, args)
        runs.append(child.to_json())
        if not child.ok:
            log(f"  d3rlpy {algo} seed {seed}: FAILED ({child.error})\n{child.stderr_tail}")
            return {"error": child.error, "runs": runs}
        final.append(child.payload["final_eval_return"])
        rates.append(child.payload["updates_per_s"])
        walls.append(child.wall_s)
    record = {"runs": runs, "final": final, "best": None, "wall_s": sum(walls),
              "updates_per_s": sum(rates) / len(rates)}  # fmt: skip
    log(f"  d3rlpy {algo}: {sum(walls):.0f} s, final {fmt_se(final)}")
    return record


def mean_se(values) -> tuple[float, float] | None:
    """Mean and standard error (sample std / sqrt(n)) of ``values``."""
    values = [v for v in values or () if v is not None]
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def fmt_se(values) -> str:
    s = mean_se(values)
    return "-" if s is None else f"{s[0]:.1f} +- {s[1]:.1f}"


def comparison(crr: dict, bc: dict) -> dict | None:
    """CRR's mean final return minus BC's, with the standard error of the difference."""
    a, b = mean_se(crr.get("final")), mean_se(bc.get("final"))
    if a is None or b is None:
        return None
    diff, se = a[0] - b[0], math.hypot(a[1], b[1])
    return {"difference": diff, "se": se, "standard_errors": diff / se if se > 0 else None}


def table(info: dict, results: dict, args) -> None:
    log("")
    for name, part in info.get("parts", {}).items():
        log(
            f"dataset {name}: {part['episodes']} episodes, {part['steps']} steps, return "
            f"{part['return_mean']:.1f} +- {part['return_std']:.1f} (std over episodes)"
        )
    mixed = info["mixed"]
    log(
        f"dataset mixed: {mixed['episodes']} episodes, {mixed['steps']} steps, return "
        f"{mixed['return_mean']:.1f} +- {mixed['return_std']:.1f}"
    )
    log(
        f"{args.updates} updates each; final: greedy return of the final parameters over "
        f"{args.eval_episodes} episodes, mean +- s.e. over {args.seeds} seeds"
    )
    header = f"{'system':<12} {'final greedy':>16} {'best in training':>17} {'process s':>10} "
    log(header + f"{'updates/s':>10}  per seed")
    for name, record in results.items():
        if "error" in record:
            log(f"{name:<12} FAILED: {record['error']}")
            continue
        busy = other_load(record.get("train") or record["runs"][0]) > BUSY_WARNING
        rate = record.get("updates_per_s")
        per_seed = ", ".join(f"{v:.1f}" for v in record["final"])
        log(
            f"{name + ('*' if busy else ''):<12} {fmt_se(record['final']):>16} "
            f"{fmt_se(record.get('best')):>17} {record['wall_s']:>10.0f} "
            f"{'-' if rate is None else f'{rate:,.0f}':>10}  {per_seed}"
        )
    for system in ("heron", "d3rlpy"):
        crr, bc = results.get(f"{system} CRR"), results.get(f"{system} BC")
        if crr and bc and (c := comparison(crr, bc)):
            ratio = c["standard_errors"]
            log(
                f"{system}: CRR - BC = {c['difference']:.1f} +- {c['se']:.1f}"
                + ("" if ratio is None else f" ({ratio:.1f} standard errors)")
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="an existing Minari dataset (default: make one)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="heron,d3rlpy or one")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--updates", type=int, default=UPDATES, help="gradient steps each")
    parser.add_argument("--online-steps", type=int, default=MEDIUM_ONLINE_STEPS)
    parser.add_argument("--medium-episodes", type=int, default=MEDIUM_EPISODES)
    parser.add_argument("--random-episodes", type=int, default=RANDOM_EPISODES)
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--seed", type=int, default=0, help="of the dataset")
    parser.add_argument("--heron", default=str(Path(sys.executable).parent / "heron"))
    parser.add_argument("--torch-threads", type=int, default=1, help="d3rlpy: 0 = default")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per process, s")
    parser.add_argument("--wait-idle", type=float, default=0.0)
    parser.add_argument("--out", default=str(RESULTS / "offline_crr.json"))
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))}; choose from heron, d3rlpy")
    if args.dataset:
        from heron.offline import read_dataset

        dataset = Path(args.dataset)
        info = {"mixed": read_dataset(dataset).summary()}
        WORK.mkdir(parents=True, exist_ok=True)
    else:
        log(f"[dataset] {args.random_episodes} random + {args.medium_episodes} medium episodes")
        dataset, info = make_dataset(args)
    log(f"\n[train] {args.updates} updates, {args.seeds} seeds each, on {dataset}")
    results: dict[str, dict] = {}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(
            json.dumps(
                {"dataset": str(dataset), "dataset_info": info, "updates": args.updates,
                 "seeds": args.seeds, "eval_episodes": args.eval_episodes,
                 "results": results, "machine": machine_info()},
                indent=2,
            )
        )  # fmt: skip

    if "heron" in systems:
        results["heron CRR"] = bench_heron(dataset, "heron_crr", [], args)
        save()
        bc = ["--crr.policy-improvement-mode", "all"]
        results["heron BC"] = bench_heron(dataset, "heron_bc", bc, args)
        save()
    if "d3rlpy" in systems:
        for algo in ("crr", "bc"):
            results[f"d3rlpy {algo.upper()}"] = bench_d3rlpy(dataset, algo, args)
            save()
    table(info, results, args)
    for system in ("heron", "d3rlpy"):
        crr, bc = results.get(f"{system} CRR"), results.get(f"{system} BC")
        if crr and bc:
            info.setdefault("comparison", {})[system] = comparison(crr, bc)
    save()
    log(f"results: {out}")


if __name__ == "__main__":
    sys.exit(main())
