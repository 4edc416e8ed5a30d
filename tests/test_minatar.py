"""MinAtar through gymnax: conv PPO from the shipped Breakout preset learns (heron/presets/
ppo.toml has the figures it is held to)."""

import dataclasses
import json

import pytest

from heron import presets
from heron.api import build, train

BREAKOUT = "gymnax:Breakout-MinAtar"


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [(e["step"], e["return_mean"]) for e in lines if e["kind"] == "eval"]


@pytest.mark.slow
def test_conv_ppo_learns_breakout_from_its_preset(tmp_path):
    """The preset's conv PPO, evaluated every 8k steps and stopped at the first greedy
    return >= 5 within 131k steps: seeds 0-2 first reached it at 33k, 41k and 41k steps
    (5.5, 6.0, 5.2) and ended the full 131k at 6.6, 7.0 and 7.0 (60-90 s a run on 2 shared
    cores). 10 is not reached this soon: seed 0 plateaus at 6.3-6.8 up to 280k steps."""
    config, run = presets.preset("ppo", BREAKOUT)
    run = dataclasses.replace(run, steps=131_072, eval_every_n=4, stop_at_return=5.0, seed=0)
    summary = train(build("ppo", config, run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= 5.0, _greedy_evals(tmp_path / "run")
