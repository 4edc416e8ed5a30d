"""Learning tests: fixed seeds, honest thresholds, default hyperparameters."""

import json

import pytest

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


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, budget", [("gymnax:CartPole-v1", 100_000), ("gym:CartPole-v1", 150_000)]
)
def test_ppo_solves_cartpole(env, budget, tmp_path):
    run = RunConfig(env=env, steps=budget, seed=0)
    summary = train(build("ppo", PPOConfig(), run), str(tmp_path / "run"))
    evals = _greedy_evals(tmp_path / "run")
    assert summary["steps"] <= budget + run.num_envs * PPOConfig().unroll_length
    assert summary["best_eval_return"] >= 475, evals
    assert summary["final_eval_return"] >= 475, evals


@pytest.mark.slow
def test_recurrent_ppo_remembers_what_masked_cartpole_hides(tmp_path):
    """Masked CartPole hides the velocities: an LSTM policy recovers them from its memory,
    a feed-forward one cannot (seed 0, same budget; the issue asks for >= 400 within 1M)."""
    run = RunConfig(env="heron:CartPole-masked-v1", steps=300_000, seed=0, eval_every_n=10)
    recurrent = PPOConfig(
        network=NetworkConfig(core="lstm"),
        use_rollout_state=True,
        sequence_length=16,
        batch_size=16,
    )
    lstm = train(build("ppo", recurrent, run), str(tmp_path / "lstm"))
    feed_forward = train(build("ppo", PPOConfig(), run), str(tmp_path / "ff"))
    assert lstm["best_eval_return"] >= 400, _greedy_evals(tmp_path / "lstm")
    assert feed_forward["best_eval_return"] < 150, _greedy_evals(tmp_path / "ff")


@pytest.mark.slow
def test_crr_learns_pendulum(tmp_path):
    """CRR online on gymnax Pendulum-v1, seed 0: eval >= -400 within 100k env steps (here
    within 40k; rewards scaled by 0.1 for the learner so values fit the default atoms)."""
    from heron.agents import CRRConfig

    run = RunConfig(
        env="gymnax:Pendulum-v1",
        steps=40_000,
        seed=0,
        reward_scale=0.1,
        eval_every_n=125,
        eval_temperatures=(0.0,),
    )
    summary = train(build("crr", CRRConfig(), run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= -400, _greedy_evals(tmp_path / "run")
