"""PPO on MinAtar Breakout: heron's preset beside rejax's own Breakout config, in one run.

Usage (from the repository root)::

    .venv/bin/python benchmarks/minatar.py                  # 1M and 10M steps (hours)
    .venv/bin/python benchmarks/minatar.py --quick          # 200k steps only
    .venv/bin/python benchmarks/minatar.py --steps 1000000  # any budgets, comma-separated

Every figure comes from a fresh subprocess, so whole-process times include interpreter
start-up, imports, compilation and the runs' own greedy evaluations:

* heron through its CLI, ``heron train ppo --env gymnax:Breakout-MinAtar --steps N``, with
  the preset a user gets (``heron/presets/ppo.toml``), on an empty JAX compilation cache;
* rejax 0.1.3 (gymnax 0.0.9, jit-compiled) in ``benchmarks/.venvs/rejax`` with rejax's own
  Breakout-MinAtar PPO config (``_peers/rejax_ppo.py --env Breakout-MinAtar``), greedy
  evaluation on the same schedule as heron's preset (every 131,072 env steps, 16 episodes);
* ``heron_equal``: heron's CLI with rejax's settings by flag (``EQUAL_FLAGS``: the same
  networks, envs, rollouts, mini-batches, epochs and evaluations), for steps/s at equal work.

Per system and budget: whole-process seconds, the greedy return of the last evaluation (and
the best one), and steps/s after compilation (heron: ``steps_per_s_after_compile`` of its
run; rejax: a second call of its compiled ``train`` without evaluation, in a separate
process at the smallest budget, at most 1M). The ratios heron/rejax and heron_equal/rejax
of steps/s are printed.
Returns are comparable only at equal env steps: each run's actual step count is shown
(each system rounds the budget up to whole iterations). Timings are reported, never
asserted. Results go to ``--out`` as JSON (default ``benchmarks/results/minatar.json``),
rewritten after every run so that an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _harness import ChildResult, SetupError, run_timed, wait_for_idle
from ppo_cartpole import (
    BUSY_WARNING,
    greedy_evals,
    heron_work,
    log,
    machine_info,
    other_load,
    prepare_peer,
    ratio,
    record_run,
    reset_dir,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PEERS = BENCH / "_peers"

HERON_ENV = "gymnax:Breakout-MinAtar"
REJAX_ENV = "Breakout-MinAtar"
FULL_BUDGETS = (1_000_000, 10_000_000)
QUICK_BUDGETS = (200_000,)
MAX_THROUGHPUT_STEPS = 1_000_000
# rejax evaluates like heron's Breakout preset: every eval_every_n (16) iterations of
# num_envs (64) x unroll_length (128) env steps, n_evals (16) greedy episodes. Checked
# against each heron run's config.json (a mismatch is printed).
EVAL_EVERY = 16 * 64 * 128
EVAL_EPISODES = 16
SYSTEMS = ("rejax", "heron", "heron_equal")
HERONS = ("heron", "heron_equal")  # heron's preset; heron at rejax's settings
# heron_equal: rejax's Breakout config (_peers/rejax_ppo.py's REJAX_BREAKOUT_PPO) in heron's
# flags, for steps/s at equal work. num_minibatches 4 of 32 envs x 32 steps: batches of 256;
# vf_coef 0.5 weighs the squared error, heron's value_cost half of it: 1.0. rejax normalises
# advantages, as heron does by default; separate actor and critic: heron's two towers.
EQUAL_FLAGS = (
    "--preset", "none", "--num-envs", "32", "--eval-every-n", str(EVAL_EVERY // (32 * 32)),
    "--n-evals", str(EVAL_EPISODES), "--eval-temperatures", "0",
    "--ppo.unroll-length", "32", "--ppo.batch-size", "256", "--ppo.num-epochs", "4",
    "--ppo.learning-rate", "0.00025674088686342003", "--ppo.max-grad-norm", "1",
    "--ppo.discount", "0.995", "--ppo.gae-lambda", "0.95", "--ppo.clip-range", "0.2",
    "--ppo.entropy-cost", "0.01", "--ppo.value-cost", "1.0",
    "--ppo.network.hidden-sizes", "64", "64", "--ppo.network.activation", "tanh",
)  # fmt: skip


@dataclass
class Row:
    """One (system, budget) row of the results table."""

    system: str
    budget: int
    status: str = "ok"  # ok | failed | skipped
    steps: int | None = None  # env steps actually trained
    whole_s: float | None = None
    steps_per_s: float | None = None  # after compilation
    final_return: float | None = None  # last greedy evaluation
    final_return_step: int | None = None
    best_return: float | None = None  # best greedy evaluation of the run
    updates_per_1k: float | None = None
    epochs: float | None = None
    disturbed: bool = False
    reason: str | None = None
    evals: list[dict[str, Any]] = field(default_factory=list, repr=False)


# --------------------------------------------------------------------------- runs


def default_timeout(steps: int) -> float:
    """Seconds allowed for a run of ``steps`` env steps (assumes >= 500 steps/s)."""
    return 900.0 + steps / 500.0


def measure(argv: list[str], args, steps: int, env: dict[str, str] | None = None) -> ChildResult:
    """One measurement process, first waiting (``--wait-idle``) for a quiet machine."""
    if args.wait_idle > 0:
        wait_for_idle(args.wait_idle, BUSY_WARNING)
    timeout = args.timeout if args.timeout else default_timeout(steps)
    return run_timed(argv, timeout, cwd=ROOT, env=env)


def rejax_argv(python: Path, mode: str, steps: int, args) -> list[str]:
    return [
        str(python), str(PEERS / "rejax_ppo.py"), "--env", REJAX_ENV, "--mode", mode,
        "--steps", str(steps), "--seed", str(args.seed), "--eval-every", str(EVAL_EVERY),
        "--eval-episodes", str(EVAL_EPISODES),
    ]  # fmt: skip


def rejax_row(budget: int, run: dict) -> Row:
    """Row of a rejax ``eval`` run (greedy evaluation every EVAL_EVERY steps)."""
    row = Row("rejax", budget, disturbed=other_load(run) > BUSY_WARNING)
    if "error" in run:
        row.status, row.reason = "failed", run["error"]
        return row
    result = run["result"]
    row.steps = result.get("steps")
    row.whole_s = run["wall_s"]
    row.evals = [{"step": e["step"], "return_mean": e["return_mean"]} for e in result["evals"]]
    row.updates_per_1k = result.get("updates_per_1k_steps")
    row.epochs = result.get("epochs")
    fill_returns(row)
    return row


def fill_returns(row: Row) -> None:
    """Final and best greedy return from ``row.evals``."""
    if row.evals:
        row.final_return = row.evals[-1]["return_mean"]
        row.final_return_step = row.evals[-1]["step"]
        row.best_return = max(e["return_mean"] for e in row.evals)


def heron_eval_every(config: dict[str, Any]) -> int | None:
    """Env steps between heron's evaluations, from config.json (None if unreadable)."""
    try:
        run = config["run"]
        return run["eval_every_n"] * run["num_envs"] * config["ppo"]["unroll_length"]
    except (KeyError, TypeError):
        return None


def heron_once(args, budget: int, work: Path, system: str = "heron") -> tuple[Row, dict]:
    """One ``heron train ppo`` run at ``budget`` steps: with the Breakout preset
    (``heron``) or with rejax's settings (``heron_equal``)."""
    name = f"{system}_{budget}"
    run_dir = work / name
    if run_dir.exists():
        reset_dir(run_dir)
    env = None
    if args.heron_cache == "cold":
        env = {"HERON_COMPILE_CACHE": str(reset_dir(work / f"{name}.jax-cache"))}
    argv = [
        str(args.heron), "train", "ppo", "--env", HERON_ENV, "--steps", str(budget),
        "--seed", str(args.seed), "--run-dir", str(run_dir),
        *(EQUAL_FLAGS if system == "heron_equal" else ()),
    ]  # fmt: skip
    runs: dict[str, Any] = {}
    label = f"{system} {budget:,} steps"
    record_run(runs, name, label, measure(argv, args, budget, env))
    run = runs[name]
    run["compile_cache"] = args.heron_cache
    row = Row(system, budget, disturbed=other_load(run) > BUSY_WARNING)
    if "error" in run:
        row.status, row.reason = "failed", run["error"]
        return row, run
    payload = run["result"]
    actual_dir = Path(payload.get("run_dir") or run_dir)
    row.steps = payload.get("steps")
    row.whole_s = run["wall_s"]
    row.steps_per_s = payload.get("steps_per_s_after_compile")
    try:
        config = json.loads((actual_dir / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    work_per_step = heron_work(config)
    row.updates_per_1k = work_per_step.get("updates_per_1k_steps")
    row.epochs = work_per_step.get("epochs")
    run["preset"] = payload.get("preset")
    run["config"] = {k: config.get(k) for k in ("run", "ppo")} if config else None
    every = heron_eval_every(config)
    run["eval_every_steps"] = every
    if every is not None and every != EVAL_EVERY:
        log(f"    note: heron evaluated every {every:,} steps, rejax every {EVAL_EVERY:,}")
    metrics = actual_dir / "metrics.jsonl"
    if metrics.exists():
        row.evals = greedy_evals(metrics)
        fill_returns(row)
    if row.final_return is None:  # no metrics (e.g. --no-summaries): the JSON line's figures
        row.final_return = payload.get("final_eval_return")
        row.best_return = payload.get("best_eval_return")
    run["greedy_evals"] = row.evals
    return row, run


# --------------------------------------------------------------------------- report


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_row(row: Row) -> tuple[str, ...]:
    work = "-"
    if row.updates_per_1k is not None and row.epochs is not None:
        work = f"{row.updates_per_1k:.1f}, {row.epochs:g}"
    return (
        row.system,
        f"{row.budget:,}",
        row.status + ("*" if row.disturbed else ""),
        fmt(row.steps, ","),
        fmt(row.whole_s, ".1f"),
        fmt(row.steps_per_s, ",.0f"),
        fmt(row.final_return, ".2f"),
        fmt(row.best_return, ".2f"),
        work,
    )


def format_table(rows: list[Row]) -> str:
    header = (
        "system",
        "budget",
        "status",
        "steps",
        "whole s",
        "steps/s",
        "final greedy",
        "best greedy",
        "updates/1k, epochs",
    )
    cells = [header, *(table_row(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]

    def line(values) -> str:
        return "  ".join(
            value.ljust(width) if i in (0, 2) else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=True))
        )

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(values) for values in cells[1:])])


def find(rows: list[Row], system: str, budget: int) -> Row | None:
    return next((r for r in rows if r.system == system and r.budget == budget), None)


def compute_ratios(rows: list[Row], throughput_budget: int) -> dict[str, Any]:
    """Each heron system against rejax: steps/s, whole-process time and return per budget."""
    return {system: heron_ratios(rows, system, throughput_budget) for system in HERONS}


def heron_ratios(rows: list[Row], system: str, throughput_budget: int) -> dict[str, Any]:
    rejax_rate = next((r.steps_per_s for r in rows if r.system == "rejax" and r.steps_per_s), None)
    heron_at = find(rows, system, throughput_budget)
    heron_rates = [r for r in rows if r.system == system and r.steps_per_s]
    heron_rate_row = heron_at if heron_at and heron_at.steps_per_s else None
    if heron_rate_row is None and heron_rates:
        heron_rate_row = heron_rates[0]
    per_budget = {}
    for budget in sorted({r.budget for r in rows}):
        heron, rejax = find(rows, system, budget), find(rows, "rejax", budget)
        if heron is None or rejax is None:
            continue
        per_budget[str(budget)] = {
            "heron_over_rejax_whole_s": ratio(heron.whole_s, rejax.whole_s),
            "heron_steps_per_s_over_rejax": ratio(heron.steps_per_s, rejax_rate),
            "final_return_heron_minus_rejax": (
                heron.final_return - rejax.final_return
                if heron.final_return is not None and rejax.final_return is not None
                else None
            ),
        }
    return {
        "heron_over_rejax_steps_per_s": ratio(
            heron_rate_row.steps_per_s if heron_rate_row else None, rejax_rate
        ),
        "heron_steps_per_s_from_budget": heron_rate_row.budget if heron_rate_row else None,
        "rejax_steps_per_s_from_steps": throughput_budget,
        "per_budget": per_budget,
    }


def format_ratios(all_ratios: dict[str, Any]) -> str:
    return "\n".join(format_system_ratios(system, all_ratios[system]) for system in HERONS)


def format_system_ratios(system: str, ratios: dict[str, Any]) -> str:
    def show(value: float | None, spec: str = ".2f", suffix: str = "x") -> str:
        return "n/a" if value is None else format(value, spec) + suffix

    heron_budget = ratios["heron_steps_per_s_from_budget"]
    lines = [
        f"{system} / rejax:",
        f"  steps/s after compile  {show(ratios['heron_over_rejax_steps_per_s'])}"
        f"  (higher is better; heron: its run at {fmt(heron_budget, ',')} steps, rejax: a"
        f" second call of its {ratios['rejax_steps_per_s_from_steps']:,}-step train)",
    ]
    for budget, values in ratios["per_budget"].items():
        lines.append(
            f"  @{int(budget):,}: whole-process s {show(values['heron_over_rejax_whole_s'])}"
            " (lower is better), final greedy return heron - rejax "
            f"{show(values['final_return_heron_minus_rejax'], '+.2f', '')}"
        )
    return "\n".join(lines)


NOTES = f"""\
notes:
  whole s       wall clock of a fresh process: start-up, imports, compilation (heron: on
                an empty compilation cache unless --heron-cache default), training, and
                the greedy evaluations both systems run ({EVAL_EPISODES} episodes every \
{EVAL_EVERY:,}
                env steps); heron also writes its checkpoints, metrics and summaries.
  steps/s       heron: steps_per_s_after_compile of its run (training iterations only);
                rejax: a second call of the compiled train function, without evaluation.
  final greedy  mean greedy return of the run's last evaluation (MinAtar's 1,000-step
                episode limit); best greedy: the run's best evaluation. One seed, one run:
                compare returns only between rows of (nearly) equal steps.
  networks      not the same: heron's preset is gymnax-blines' separate 2x256 ReLU MLPs
                (lr 5e-4, entropy cost 0.05, 64 envs x 128 steps); rejax's config
                uses its default separate 64-64 tanh MLPs on the flattened grid (lr 2.6e-4,
                32 envs x 32 steps). updates/1k: gradient updates per 1,000 env steps, and
                epochs (passes over each sample), from each system's own settings.
  *             other processes loaded the CPUs during that run, so its timings are
                disturbed (cpu_busy_before / cpu_other_during in the JSON)."""


# --------------------------------------------------------------------------- main


def parse_budgets(text: str) -> list[int]:
    budgets = sorted({int(float(part)) for part in text.split(",") if part.strip()})
    if not budgets or budgets[0] <= 0:
        raise argparse.ArgumentTypeError("--steps wants positive step counts, e.g. 1000000")
    return budgets


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"budget {QUICK_BUDGETS[0]:,} steps only"
    )
    parser.add_argument(
        "--steps",
        type=parse_budgets,
        default=None,
        help="comma-separated env-step budgets (default 1000000,10000000; --quick 200000)",
    )
    parser.add_argument(
        "--throughput-steps",
        type=int,
        default=None,
        help="steps of rejax's throughput process "
        f"(default the smallest budget, at most {MAX_THROUGHPUT_STEPS:,})",
    )
    parser.add_argument(
        "--out", type=Path, default=BENCH / "results" / "minatar.json", help="results JSON path"
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {','.join(SYSTEMS)}",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heron", default=str(ROOT / ".venv" / "bin" / "heron"), help="heron CLI")
    parser.add_argument(
        "--heron-cache",
        choices=("cold", "default"),
        default="cold",
        help="cold: a new empty JAX compilation cache per heron run; default: heron's own",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds allowed per process (default 900 + steps / 500)",
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each measurement, wait up to this long for other CPU load to go away",
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = list(QUICK_BUDGETS if args.quick else FULL_BUDGETS)
    if args.throughput_steps is None:
        args.throughput_steps = min(args.steps[0], MAX_THROUGHPUT_STEPS)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(args.systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    args.out = args.out.resolve()
    return args


class Bench:
    """The runs of one invocation, in order of budget, results rewritten after each."""

    def __init__(self, args) -> None:
        self.args = args
        self.started = time.perf_counter()
        self.rows: list[Row] = []
        self.records: dict[str, Any] = {s: {"runs": {}} for s in args.systems}
        self.rejax_python: Path | None = None
        self.work = args.out.parent / "heron_minatar_runs"

    def prepare(self) -> None:
        """Make the rejax venv and check the heron CLI; unusable systems get skipped rows."""
        if "rejax" in self.args.systems:
            log("\n[rejax] venv")
            try:
                self.rejax_python = prepare_peer("rejax")
            except SetupError as exc:
                log(f"  skipped: could not prepare its venv: {exc}")
                self.skip("rejax", f"venv setup failed: {exc}")
        heron = Path(self.args.heron)
        for system in HERONS:
            if system in self.args.systems and not (heron.is_file() and os.access(heron, os.X_OK)):
                log(f"\n[{system}] skipped: {heron} not found or not executable")
                self.skip(system, f"{heron} not found or not executable")

    def skip(self, system: str, reason: str) -> None:
        self.args.systems = [s for s in self.args.systems if s != system]
        for budget in self.args.steps:
            self.rows.append(Row(system, budget, status="skipped", reason=reason))

    def rejax_budget(self, budget: int) -> None:
        runs = self.records["rejax"]["runs"]
        name = f"eval_{budget}"
        argv = rejax_argv(self.rejax_python, "eval", budget, self.args)
        record_run(runs, name, f"rejax {budget:,} steps", measure(argv, self.args, budget))
        row = rejax_row(budget, runs[name])
        result = runs[name].get("result") or {}
        self.records["rejax"].setdefault("config", result.get("config"))
        self.records["rejax"].setdefault("versions", result.get("versions"))
        self.rows.append(row)

    def rejax_throughput(self) -> None:
        steps = self.args.throughput_steps
        runs = self.records["rejax"]["runs"]
        argv = rejax_argv(self.rejax_python, "throughput", steps, self.args)
        label = f"rejax throughput {steps:,} steps"
        payload = record_run(runs, "throughput", label, measure(argv, self.args, steps))
        # shown in the row of the first budget (whose run came just before)
        row = find(self.rows, "rejax", self.args.steps[0])
        if payload and row is not None:
            row.steps_per_s = payload.get("steps_per_s")
            row.disturbed = row.disturbed or other_load(runs["throughput"]) > BUSY_WARNING

    def heron_budget(self, budget: int, system: str) -> None:
        row, run = heron_once(self.args, budget, self.work, system)
        self.records[system]["runs"][f"{system}_{budget}"] = run
        self.rows.append(row)

    def run(self) -> None:
        self.prepare()
        for i, budget in enumerate(self.args.steps):
            log(f"\n[{budget:,} steps]")
            for system in self.args.systems:
                if system == "rejax":
                    self.rejax_budget(budget)
                    if i == 0:
                        self.rejax_throughput()
                else:
                    self.heron_budget(budget, system)
                self.write()

    def ordered_rows(self) -> list[Row]:
        return sorted(self.rows, key=lambda r: (r.budget, SYSTEMS.index(r.system)))

    def results(self) -> dict[str, Any]:
        rows = self.ordered_rows()
        return {
            "benchmark": "minatar",
            "env": {"heron": HERON_ENV, "rejax": REJAX_ENV},
            "budgets": self.args.steps,
            "quick": self.args.quick,
            "seed": self.args.seed,
            "eval": {"every_steps": EVAL_EVERY, "episodes": EVAL_EPISODES, "greedy": True},
            "heron_compile_cache": self.args.heron_cache,
            "rejax_throughput_steps": self.args.throughput_steps,
            "machine": machine_info(),
            "total_wall_s": time.perf_counter() - self.started,
            "summary": [asdict(row) for row in rows],
            "ratios": compute_ratios(rows, self.args.throughput_steps),
            "systems": self.records,
        }

    def write(self) -> dict[str, Any]:
        results = self.results()
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(results, indent=2) + "\n")
        return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budgets = ", ".join(f"{b:,}" for b in args.steps)
    log(f"PPO {HERON_ENV}: {', '.join(args.systems)} at {budgets} steps, seed {args.seed}")
    bench = Bench(args)
    bench.run()
    results = bench.write()
    log("\n" + format_table(bench.ordered_rows()))
    log("\n" + format_ratios(results["ratios"]))
    log("\n" + NOTES)
    log(f"\nresults written to {args.out} ({results['total_wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
