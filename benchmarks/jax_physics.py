"""heron's PPO beside Brax's own PPO trainer and rejax's PPO on JAX-native physics, at equal
work.

    .venv/bin/python benchmarks/jax_physics.py                          # CheetahRun, CPU preset
    .venv/bin/python benchmarks/jax_physics.py --env brax:ant --steps 1000000
    .venv/bin/python benchmarks/jax_physics.py --preset playground:CheetahRun   # on a GPU

They run on the same device, one after the other, each in a fresh process. Brax's trainer
runs in its own venv (benchmarks/.venvs/brax, made from _peers/brax-requirements.txt: it
needs an older JAX than heron pins, 0.8.3); rejax 0.1.3 in another
(benchmarks/.venvs/rejax-brax: jax 0.4.38 with brax 0.12.1) and only on ``brax:<name>``
(rejax has no Playground adapter). heron runs from its shipped preset (``<env>@cpu`` where
JAX has no GPU); the peers with the same envs, steps per update, mini-batches, epochs,
discount, GAE lambda, learning rate, entropy cost, clipping, reward scale, observation
normalisation and network sizes (Brax's policy stays its tanh-squashed Gaussian with a
state-dependent std; rejax's its separate actor and critic optimisers and clipped value
loss). Printed per system: env steps/s after compile (evaluations included), whole-process
wall time, final and best greedy return; then heron's ratios. Results go to
benchmarks/results/jax_physics.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _harness import ensure_venv, run_timed

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "_peers"
VENVS = Path(__file__).resolve().parent / ".venvs"
# Each peer's venv (.venvs/<venv>, made from _peers/<venv>-requirements.txt) and script.
PEER_RUNS = {"brax": ("brax", "brax_ppo.py"), "rejax": ("rejax-brax", "rejax_brax_ppo.py")}


def heron_settings(env: str, preset: str) -> tuple:
    sys.path.insert(0, str(ROOT))
    from heron import presets

    return presets.preset("ppo", env, preset)


def peer_argv(python: Path, script: str, env: str, config, run, steps: int, seed: int) -> list[str]:
    """A peer's trainer (Brax's, rejax's) doing heron's work: one unroll of ``unroll_length``
    per env per update, split into heron's mini-batches."""
    steps_per_update = run.num_envs * config.unroll_length
    if config.sequence_length != 1 or steps_per_update % config.batch_size:
        raise SystemExit("jax_physics.py: the preset's mini-batches must be whole steps")
    minibatches = steps_per_update // config.batch_size
    if run.num_envs % minibatches:
        raise SystemExit(f"jax_physics.py: {minibatches} mini-batches must divide num_envs")
    evals = steps // (steps_per_update * run.eval_every_n) + 1  # Brax's first is at step 0
    network = config.network
    return [
        str(python), str(PEERS / script), "--env", env, "--steps", str(steps),
        "--seed", str(seed), "--num-envs", str(run.num_envs),
        "--unroll-length", str(config.unroll_length),
        "--batch-size", str(run.num_envs // minibatches),
        "--num-minibatches", str(minibatches), "--num-epochs", str(config.num_epochs),
        "--discount", str(config.discount), "--gae-lambda", str(config.gae_lambda),
        "--learning-rate", str(config.learning_rate),
        "--entropy-cost", str(config.entropy_cost), "--clip-range", str(config.clip_range),
        "--reward-scale", str(run.reward_scale),
        "--hidden-sizes", *map(str, network.hidden_sizes), "--activation", network.activation,
        "--num-evals", str(evals), "--eval-episodes", str(run.n_evals),
    ]  # fmt: skip


def heron_argv(env: str, preset: str, steps: int, seed: int, run_dir: Path) -> list[str]:
    return [
        str(ROOT / ".venv" / "bin" / "heron"), "train", "ppo", "--env", env,
        "--preset", preset, "--steps", str(steps), "--seed", str(seed),
        "--eval-temperatures", "0", "--run-dir", str(run_dir),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="playground:CheetahRun")
    parser.add_argument("--preset", help="heron's preset key (default: <env>@cpu on a CPU)")
    parser.add_argument("--steps", type=int, help="env steps (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default="heron,brax,rejax")
    parser.add_argument("--timeout", type=float, default=3 * 3600.0)
    parser.add_argument("--work", default="/tmp/heron-jax-physics")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "jax_physics.json"))
    args = parser.parse_args(argv)

    import jax

    preset = args.preset or (args.env if jax.default_backend() == "gpu" else f"{args.env}@cpu")
    config, run = heron_settings(args.env, preset)
    steps = args.steps or run.steps
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    out = Path(args.out)
    if out.exists():  # keeps the other systems' runs of the same work (--systems brax reruns one)
        earlier = json.loads(out.read_text())
        if (earlier.get("env"), earlier.get("preset"), earlier.get("steps")) == (
            args.env,
            preset,
            steps,
        ):
            results.update(earlier["runs"])
    for system in args.systems.split(","):
        if system == "heron":
            run_dir = work / f"heron_{args.env.replace(':', '_')}_s{args.seed}"
            if run_dir.exists():
                raise SystemExit(f"jax_physics.py: {run_dir} exists; remove it or pass --work")
            argv_ = heron_argv(args.env, preset, steps, args.seed, run_dir)
        elif system in PEER_RUNS:
            if system == "rejax" and not args.env.startswith("brax:"):
                print(f"[rejax] skipped: rejax runs brax:<name> only, not {args.env}", flush=True)
                continue
            venv, script = PEER_RUNS[system]
            python = ensure_venv(VENVS / venv, PEERS / f"{venv}-requirements.txt")
            argv_ = peer_argv(python, script, args.env, config, run, steps, args.seed)
        else:
            choices = ", ".join(["heron", *PEER_RUNS])
            raise SystemExit(f"jax_physics.py: unknown system {system!r}; choose {choices}")
        print(f"[{system}] {' '.join(argv_)}", flush=True)
        child = run_timed(argv_, args.timeout, cwd=ROOT if system == "heron" else PEERS)
        if not child.ok:
            print(f"  failed: {child.error}\n{child.stderr_tail}", flush=True)
        results[system] = {**child.to_json(), "whole_process_s": child.wall_s}

    device = jax.devices()[0]
    print(f"\n{args.env}, preset {preset}, {steps:,} steps, seed {args.seed}, on {device}")
    print(f"{'system':8} {'steps/s':>10} {'whole s':>9} {'final':>9} {'best':>9}")
    for system, record in results.items():
        r = record["result"] or {}
        rate = r.get("steps_per_s_after_compile")
        final, best = r.get("final_eval_return"), r.get("best_eval_return")
        print(
            f"{system:8} {rate or float('nan'):10,.0f} {record['whole_process_s']:9.0f} "
            f"{final if final is not None else float('nan'):9.1f} "
            f"{best if best is not None else float('nan'):9.1f}"
        )
    heron = results.get("heron", {}).get("result")
    for peer in PEER_RUNS:
        theirs = results.get(peer, {}).get("result")
        if heron and theirs:
            rate = heron["steps_per_s_after_compile"] / theirs["steps_per_s_after_compile"]
            whole = results[peer]["whole_process_s"] / results["heron"]["whole_process_s"]
            print(f"heron/{peer}: steps/s {rate:.2f}x, whole process {whole:.2f}x faster")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"env": args.env, "preset": preset, "steps": steps, "runs": results}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
