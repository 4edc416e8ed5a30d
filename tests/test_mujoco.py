"""MuJoCo through Gymnasium: SAC and TD3 from their shipped HalfCheetah-v5 presets learn
(heron/presets/sac.toml and td3.toml are rl-baselines3-zoo's settings: one env, one update
per env step, 10,000 steps before learning)."""

import dataclasses
import json

import pytest

from heron import presets
from heron.api import build, train

HALF_CHEETAH = "gym:HalfCheetah-v5"
# (greedy return to reach, within steps). Measured 2026-12-06 with the presets as a user
# gets them (`heron train ALGO --env gym:HalfCheetah-v5 --seed S`; greedy evaluation of 5
# episodes every 5k steps), seeds 0-2:
# SAC at 20k-40k: -242, -55, 218, 759, 2055 / 61, 401, 826, 1811, 2335 / -23, -136, 643,
#      1109, 1995: >= 500 first at 35k, 30k, 30k.
# TD3 at 15k-35k: -194, 427, 792, 1538, 2144 / -2, 192, 790, 1922, 1657 / -455, 1151, 2004,
#      3155, 3772: >= 700 first at 25k, 25k, 20k.
# (An earlier measurement, before one-seed runs stopped vmapping their iteration over seeds
# and so rounded differently, had SAC >= 500 at 25k, 30k, 30k.) The budgets leave two
# evaluations (10k steps) over the slowest seed. The test runs a seed that crosses its
# threshold early and by a wide margin: the budget is what can fail, and a crossing far from
# the threshold keeps the test's cost (its updates: 7-11 ms each) alike on CPUs that round
# differently. SAC seeds 3-6 at 15k-25k (2026-12-07, a Zen 3 CPU): -26, -230, 1227 / -101,
# -306, 746 / 73, -142, -15 / -12, -202, -236: seed 3 crosses at 25k, 5k steps (about 55
# s of updates) before seed 1's 30k. TD3 seed 2: 1151 at 20k; no seed of 3-8 was near 700 at
# 15k (-133, -108, 176, 136, 264, 43 on Zen 3).
BUDGETS = {"sac": (500.0, 45_000), "td3": (700.0, 35_000)}
SEEDS = {"sac": 3, "td3": 2}


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [(e["step"], round(e["return_mean"])) for e in lines if e["kind"] == "eval"]


@pytest.mark.slow
@pytest.mark.user_compile  # bound by its updates, which XLA's unoptimised kernels slow down
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_learns_half_cheetah_from_its_preset(algo, tmp_path):
    """The shipped preset, stopped at the first greedy evaluation at the threshold (SAC seed
    3 at 25k steps, TD3 seed 2 at 20k)."""
    threshold, steps = BUDGETS[algo]
    config, run = presets.preset(algo, HALF_CHEETAH)
    run = dataclasses.replace(run, steps=steps, stop_at_return=threshold, seed=SEEDS[algo])
    summary = train(build(algo, config, run), str(tmp_path / "run"))
    assert summary["stopped_at_return"], _greedy_evals(tmp_path / "run")
    assert summary["best_eval_return"] >= threshold
