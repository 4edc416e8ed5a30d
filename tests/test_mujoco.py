"""MuJoCo through Gymnasium: SAC and TD3 from their shipped HalfCheetah-v5 presets learn
(heron/presets/sac.toml and td3.toml are rl-baselines3-zoo's settings: one env, one update
per env step, 10,000 steps before learning)."""

import dataclasses
import json

import pytest

from heron import presets
from heron.api import build, train

HALF_CHEETAH = "gym:HalfCheetah-v5"
# (steps, greedy return to reach): THRESHOLDS_MEASURED gives what seeds 0-2 reached.
BUDGETS = {"sac": (30_000, 1_000.0), "td3": (30_000, 1_000.0)}


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [(e["step"], round(e["return_mean"])) for e in lines if e["kind"] == "eval"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_learns_half_cheetah_from_its_preset(algo, tmp_path):
    steps, threshold = BUDGETS[algo]
    config, run = presets.preset(algo, HALF_CHEETAH)
    run = dataclasses.replace(
        run, steps=steps, eval_every_n=2_500, stop_at_return=threshold, seed=0, checkpoints=False
    )
    summary = train(build(algo, config, run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= threshold, _greedy_evals(tmp_path / "run")
