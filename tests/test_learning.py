"""Learning tests: fixed seeds, honest thresholds, the settings a user gets (the defaults or
the shipped presets, heron/presets/), each with a margin over the spread measured on seeds
0-2 (figures in the presets' comments)."""

import dataclasses
import json

import pytest

from heron import presets
from heron.agents import NetworkConfig, PPOConfig
from heron.api import build, train
from heron.training import RunConfig


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [
        (e["step"], e["return_mean"])
        for e in lines
        if e["kind"] == "eval" and e["temperature"] == 0.0
    ]


def _train_preset(algo, env, tmp_path, stop_at_return=None):
    """The shipped preset, ended (where the test's claim is a best return) at the first
    greedy evaluation that reaches ``stop_at_return``: the steps before are the full run's."""
    config, run = presets.preset(algo, env)
    run = dataclasses.replace(run, stop_at_return=stop_at_return)
    return train(build(algo, config, run), str(tmp_path / "run")), run


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, budget", [("gymnax:CartPole-v1", 100_000), ("gym:CartPole-v1", 150_000)]
)
def test_ppo_solves_cartpole(env, budget, tmp_path):
    """On gymnax the whole budget runs: the policy is solved on the way and keeps most of it
    at the end (seed 0's last greedy return was >= 475 on the machines of earlier runs and 271
    on an AMD EPYC with AVX2, where seeds 1-3 ended at 500: where a run with a constant
    learning rate ends depends on the CPU's rounding, hence the margin); the Gymnasium run
    (stepped on the host, slower) checks that it gets there, and stops there."""
    host_loop = env.startswith("gym:")
    run = RunConfig(env=env, steps=budget, seed=0, stop_at_return=475.0 if host_loop else None)
    summary = train(build("ppo", PPOConfig(), run), str(tmp_path / "run"))
    evals = _greedy_evals(tmp_path / "run")
    assert summary["steps"] <= budget + run.num_envs * PPOConfig().unroll_length
    assert summary["best_eval_return"] >= 475, evals
    assert summary["final_eval_return"] >= (475 if host_loop else 200), evals


@pytest.mark.slow
def test_recurrent_ppo_remembers_what_masked_cartpole_hides(tmp_path):
    """Masked CartPole hides the velocities: the preset's LSTM policy recovers them from its
    memory (>= 400 from 25-37k steps on seeds 0-2), a feed-forward one with the same run
    settings cannot."""
    lstm, run = _train_preset("ppo", "heron:CartPole-masked-v1", tmp_path / "lstm", 400.0)
    run = dataclasses.replace(run, stop_at_return=None)
    assert lstm["best_eval_return"] >= 400, _greedy_evals(tmp_path / "lstm" / "run")
    config, _ = presets.preset("ppo", "heron:CartPole-masked-v1")
    memoryless = dataclasses.replace(
        config, network=NetworkConfig(), use_rollout_state=False, sequence_length=1, batch_size=512
    )
    feed_forward = train(build("ppo", memoryless, run), str(tmp_path / "ff"))
    assert feed_forward["best_eval_return"] < 200, _greedy_evals(tmp_path / "ff")


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, threshold",
    [
        ("gymnax:Pendulum-v1", -250.0),  # preset: -163 +- 5 at 100k (rl-zoo: -172)
        ("gymnax:Acrobot-v1", -100.0),  # preset: -76 +- 1 at 1M (rl-zoo: -73.5)
    ],
)
def test_ppo_presets_learn(env, threshold, tmp_path):
    summary, _ = _train_preset("ppo", env, tmp_path, threshold)
    assert summary["best_eval_return"] >= threshold, _greedy_evals(tmp_path / "run")


@pytest.mark.slow
def test_crr_learns_pendulum_from_its_preset(tmp_path):
    """CRR online on gymnax Pendulum-v1 with the preset: greedy >= -200 within 20k steps
    (the preset reached it at 6-8k on seeds 0-2 and ended at -136 +- 16)."""
    summary, _ = _train_preset("crr", "gymnax:Pendulum-v1", tmp_path, -200.0)
    assert summary["best_eval_return"] >= -200, _greedy_evals(tmp_path / "run")
