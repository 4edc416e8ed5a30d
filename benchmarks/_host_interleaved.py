"""heron SAC's time per update at one update per env step beside 50 updates per env step,
timed alternately in one process, so that a machine whose speed drifts between runs (a
shared VM) slows both alike. The first over the second is what the loop around the update
costs: the env step and its host callback (a JAX env pays no callback: the control).

Run by ``mujoco.py --sections host`` with heron's Python; prints one JSON line (``-P``:
this folder's ``mujoco.py`` would shadow the mujoco package)::

    .venv/bin/python -P benchmarks/_host_interleaved.py [--envs gym:HalfCheetah-v5,...]
        [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from heron import api
from heron.agents.base import ReplayConfig
from heron.agents.sac import SACConfig
from heron.run_config import RunConfig
from heron.training.driver import seed_keys

ENVS = "gymnax:Pendulum-v1,gym:Pendulum-v1,gym:HalfCheetah-v5"
LEARNING_STARTS = 1_000
CAPACITY = 100_000
UPDATES_TIMED = 100  # per round, at each ratio


def compiled_sac(env: str, ratio: float):
    """(program, state) of SAC's defaults on ``env`` at ``ratio`` updates per env step, one
    env, compiled and past its first updates."""
    replay = ReplayConfig(min_size=LEARNING_STARTS, ratio=ratio, capacity=CAPACITY)
    setup = api.build(
        "sac", SACConfig(replay=replay), RunConfig(env=env, num_envs=1, steps=10**6, seed=0)
    )
    program = setup.program()
    state = program.init(seed_keys([0]))
    state, _ = program.iteration(state, np.int32(LEARNING_STARTS + 1))
    return program, jax.block_until_ready(state)


def ms_per_update(program, state, ratio: float):
    """(state, ms per update) of ``UPDATES_TIMED`` updates in one call."""
    iterations = max(1, round(UPDATES_TIMED / ratio))
    start = time.perf_counter()
    state, metrics = program.iteration(state, np.int32(iterations))
    state = jax.block_until_ready(state)
    updates = float(metrics["train/updates"][0])
    return state, (time.perf_counter() - start) * 1e3 / updates


def measure_env(env: str, rounds: int) -> dict:
    runs = {ratio: list(compiled_sac(env, ratio)) for ratio in (1.0, 50.0)}
    times: dict[float, list[float]] = {ratio: [] for ratio in runs}
    for _ in range(rounds):
        for ratio, run in runs.items():
            run[1], ms = ms_per_update(*run, ratio)
            times[ratio].append(ms)
    one, fifty = (sorted(times[r]) for r in (1.0, 50.0))
    return {
        "env": env,
        "ms_per_update_at_1": {"min": one[0], "median": float(np.median(one))},
        "ms_per_update_at_50": {"min": fifty[0], "median": float(np.median(fifty))},
        "ratio": fifty[0] / one[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=ENVS)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    rows = [measure_env(env, args.rounds) for env in args.envs.split(",") if env]
    print(json.dumps({"rows": rows, "rounds": args.rounds, "capacity": CAPACITY}))


if __name__ == "__main__":
    main()
