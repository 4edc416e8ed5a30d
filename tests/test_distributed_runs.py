"""Runs with actors on Ray against this module's local Ray instance (tests/ray_cluster.py):
one actor against the in-process run, policy lag, the asynchronous driver with an actor
SIGKILLed, environments that raise once or always, and learning with two actors. The
baseline's exactness tests are in tests/test_distributed.py."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import ray_envs
from ray_cluster import GYM_ENV, MARKS, lines, params, small_run, train

from heron import api, cli, presets
from heron.run_config import RunConfig
from heron.training import checkpoints

pytestmark = MARKS


def test_one_actor_equals_the_in_process_run(cluster, tmp_path):
    run = small_run(cluster[0], actors=1, steps=256)
    on_ray = train(run, tmp_path / "ray")
    in_process = train(dataclasses.replace(run, actors=0, ray_address=None), tmp_path / "local")
    assert on_ray["dist"]["actors"] == 1 and "dist" not in in_process
    ours, theirs = params(tmp_path / "ray"), params(tmp_path / "local")
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs, strict=True)) < 1e-5
    assert on_ray["final_eval_return"] == pytest.approx(in_process["final_eval_return"])


def test_policy_lag_one_acts_one_version_behind(cluster, tmp_path):
    run = small_run(cluster[0], steps=256, dist={"policy_lag": 1})
    summary = train(run, tmp_path / "a")
    records = lines(tmp_path / "a")
    assert [line["dist/policy_lag_max"] for line in records] == [0.0] + [1.0] * 7
    assert summary["dist"]["policy_lag_max"] == 1.0


def test_sigkill_of_an_actor_in_an_asynchronous_run(cluster, tmp_path):
    ray_envs.arm(cluster[1], ray_envs.KILL)
    run = small_run(cluster[0], steps=512, dist={"driver": "async", "learn_queue_cap": 2})
    summary = train(run, tmp_path / "run")
    assert not os.path.exists(os.path.join(cluster[1], ray_envs.KILL))
    assert summary["dist"]["actor_restarts"] == 1 and summary["dist"]["unrolls_lost"] == 0
    records = lines(tmp_path / "run")
    assert [line["iteration"] for line in records] == list(range(1, 17))
    updates = {line["train/updates"] for line in records}
    assert len(updates) == 1 and updates.pop() > 0  # every iteration learnt, the same amount
    for line in records:
        taken = [line[f"dist/actor{a}_unrolls_taken"] for a in range(2)]
        # Each actor's unrolls were taken in order, none twice and none skipped.
        assert taken == [line[f"dist/actor{a}_next_unroll"] for a in range(2)]
        assert sum(taken) == 2 * line["iteration"]


def test_an_environment_that_raises_once_is_recovered(cluster, tmp_path, capfd):
    ray_envs.arm(cluster[1], ray_envs.RAISE_ONCE)
    summary = train(small_run(cluster[0], env=GYM_ENV, steps=256), tmp_path / "run")
    assert summary["dist"]["actor_restarts"] == 1 and summary["steps"] == 256
    err = capfd.readouterr().err
    assert "RuntimeError: environment broke at step" in err
    assert "Gymnasium environments start fresh episodes" in err


def test_an_environment_that_always_raises_stops_the_run_in_one_line(cluster, tmp_path, capfd):
    ray_envs.arm(cluster[1], ray_envs.RAISE_ALWAYS)
    run_dir = tmp_path / "run"
    argv = [
        "train", "ppo", "--env", GYM_ENV, "--env-module", "ray_envs", "--steps", "512",
        "--num-envs", "4", "--actors", "2", "--ray-address", cluster[0], "--run-dir",
        str(run_dir), "--n-evals", "2", "--eval-temperatures", "0.0", "--save-every-n", "1",
        "--done-frac-for-policy-save", "0", "--dist.max-actor-restarts", "1",
        "--ppo.unroll-length", "8", "--ppo.batch-size", "16", "--ppo.num-epochs", "2",
    ]  # fmt: skip
    try:
        status = cli.main(argv)
    finally:
        os.unlink(os.path.join(cluster[1], ray_envs.RAISE_ALWAYS))
    errors = [line for line in capfd.readouterr().err.splitlines() if "heron: error" in line]
    assert status == 1 and len(errors) == 1
    assert "actor" in errors[0] and GYM_ENV in errors[0]
    assert "RuntimeError: environment broke at step" in errors[0]
    assert "dist.max_actor_restarts=1" in errors[0]
    saved = checkpoints.latest_step(str(run_dir))
    assert saved is not None and saved < 16
    resumed = api.resume(str(run_dir))  # the environment fixed: the run continues
    assert resumed["steps"] == 512


@pytest.mark.slow
def test_crr_learns_pendulum_with_two_actors(cluster, tmp_path):
    """The Pendulum preset a user gets (`heron train crr --env gymnax:Pendulum-v1 --actors
    2`), its experience from 2 actors: greedy >= -200 within the preset's 20k steps, the
    claim of tests/test_learning.py's in-process run (seeds 0-2 on Ray: CRR_ON_RAY)."""
    config, run = presets.preset("crr", "gymnax:Pendulum-v1")
    run = dataclasses.replace(run, seed=0, actors=2, ray_address=cluster[0], stop_at_return=-200.0)
    summary = api.train(api.build("crr", config, run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= -200, lines(tmp_path / "run", "eval")


@pytest.mark.slow
def test_ppo_solves_gymnasium_cartpole_with_two_actors(cluster, tmp_path):
    """tests/test_learning.py's PPO threshold on Gymnasium CartPole, with 2 actors."""
    from heron.agents import PPOConfig

    run = RunConfig(
        env="gym:CartPole-v1", steps=150_000, seed=0, actors=2, ray_address=cluster[0],
        stop_at_return=475.0,
    )  # fmt: skip
    summary = api.train(api.build("ppo", PPOConfig(), run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= 475
