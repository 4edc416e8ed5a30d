"""Checkpoints, exact resume, several seeds in one program, and the save rule."""

import dataclasses
import glob
import json
import os
import shutil

import numpy as np
import pytest
import small_ppo
from conftest import copy_run, train_until_checkpoint
from small_ppo import PPO, build, resume

from heron.agents import NetworkConfig
from heron.api import train
from heron.training import checkpoints
from heron.training.checkpoints import CheckpointError


def metrics(run_dir, after_step=-1):
    lines = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [
        {k: v for k, v in line.items() if k != "wall_s"}
        for line in lines
        if line.get("step", 0) > after_step and line["kind"] != "note"
    ]


RECURRENT_PPO = dataclasses.replace(
    PPO,
    network=NetworkConfig(core="lstm"),
    use_rollout_state=True,
    sequence_length=4,
    batch_size=8,
)


@pytest.mark.parametrize(
    "overrides, ppo",
    [
        ({}, PPO),
        ({"separate_eval": False}, PPO),
        (
            {
                "normalize_observations": True,
                "len_history_for_policy": 2,
                "normalize_rewards": True,
            },
            PPO,
        ),
        ({"env": "heron:CartPole-masked-v1"}, RECURRENT_PPO),
    ],
    ids=[
        "plain",
        "training_episodes_as_evaluation",
        "normalised_with_history",
        "lstm",
    ],  # normalised: observations and rewards
)
def test_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch, overrides, ppo):
    """16 iterations straight, and stopped after checkpoint 8 then resumed."""
    run = small_ppo.run(**overrides)
    straight = train(build("ppo", ppo, run), str(tmp_path / "straight"))
    interrupted = str(tmp_path / "interrupted")
    train_until_checkpoint(monkeypatch, build("ppo", ppo, run), interrupted, kill_at=8)
    resumed = resume(interrupted)
    assert resumed["params_digest"] == straight["params_digest"]
    assert resumed["best_eval_return"] == straight["best_eval_return"]
    assert resumed["final_eval_return"] == straight["final_eval_return"]
    assert metrics(interrupted) == metrics(tmp_path / "straight")


def test_gymnasium_resume_restarts_episodes_and_says_so(tmp_path, monkeypatch, capsys):
    run = small_ppo.run(env="gym:CartPole-v1")
    run_dir = str(tmp_path / "run")
    train_until_checkpoint(monkeypatch, build("ppo", PPO, run), run_dir, kill_at=8)
    summary = resume(run_dir)
    assert summary["steps"] == 1024
    assert "episodes restart on resume" in capsys.readouterr().err
    notes = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl") if '"note"' in line]
    assert len(notes) == 1 and notes[0]["step"] == 8 * 64


def test_an_interrupted_write_leaves_the_previous_checkpoint(small_ppo_run, tmp_path):
    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    # What a process killed while writing checkpoint 20 leaves behind: a temporary folder.
    partial = os.path.join(run_dir, "checkpoints", "20.orbax-checkpoint-tmp-1234567")
    os.makedirs(os.path.join(partial, "default"))
    with open(os.path.join(partial, "default", "_METADATA"), "w") as f:
        f.write("{truncated")
    assert checkpoints.latest_step(run_dir) == 16
    from heron.cli import main

    assert main(["eval", run_dir, "--episodes", "2"]) == 0


def test_tensorboard_forgets_what_a_resumed_run_repeats(small_ppo_run, tmp_path):
    """A run killed after writing summaries past its last checkpoint: the resumed run tells
    TensorBoard to drop them (a SessionLog START after the checkpoint's step, tensorboardX's
    purge_step), as metrics.jsonl is cut there, so each step shows once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    for step in (12, 16):  # the run written to 1024 steps, its checkpoint at 512 (iteration 8)
        shutil.rmtree(os.path.join(run_dir, "checkpoints", str(step)))
    before = set(glob.glob(os.path.join(run_dir, "tb", "events.*")))
    resume(run_dir, steps=1024)
    (new,) = set(glob.glob(os.path.join(run_dir, "tb", "events.*"))) - before
    starts = [
        event.step
        for event in EventFileLoader(new).Load()
        if event.HasField("session_log") and event.session_log.status == SessionLog.START
    ]
    assert starts == [513]
    board = EventAccumulator(os.path.join(run_dir, "tb"))
    board.Reload()
    shown = [event.step for event in board.Scalars("train/updates")]
    assert shown == [line["step"] for line in metrics(run_dir) if line["kind"] == "train"]


def test_corrupt_checkpoints_are_a_clear_error_and_nothing_is_overwritten(small_ppo_run, tmp_path):
    """Every checkpoint damaged (a damaged latest one alone falls back to the one before: see
    tests/test_robustness.py)."""
    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    for step in checkpoints.all_steps(run_dir):
        manifest = os.path.join(run_dir, "checkpoints", str(step), "default", "manifest.ocdbt")
        with open(manifest, "wb") as f:
            f.write(b"garbage")
    before = open(os.path.join(run_dir, "metrics.jsonl")).read()
    with pytest.raises(CheckpointError, match="no readable checkpoint in .*16: the file"):
        resume(run_dir, steps=2048)
    assert open(os.path.join(run_dir, "metrics.jsonl")).read() == before


def test_resume_refuses_a_changed_shape(small_ppo_run, tmp_path):
    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    config_path = os.path.join(run_dir, "config.json")
    config = json.load(open(config_path))
    config["ppo"]["network"]["hidden_sizes"] = [32, 32]
    json.dump(config, open(config_path, "w"))
    with pytest.raises(CheckpointError, match="does not match"):
        resume(run_dir, steps=2048)


def _train_params(seed, seeds, iterations=16):
    import jax

    from heron.training.driver import seed_keys

    setup = build("ppo", PPO, small_ppo.run(seed=seed, seeds=seeds))
    program = setup.program()
    state = program.init(seed_keys(setup.seeds))
    for _ in range(iterations):
        state, metrics = program.iteration(state, np.int32(1))
    return jax.device_get((state.agent_state.params, metrics))


def test_several_seeds_report_per_seed_and_follow_the_single_runs(tmp_path):
    """Seeds 5-7 in one program: lines and a summary per seed. Each follows the single run
    with the same keys. XLA's batched CPU kernels round differently from unbatched ones
    (about 1 ulp per step), so the parameters agree to float tolerance, not bit for bit."""
    import jax
    import numpy as np

    from heron.api import load_run

    run_dir = tmp_path / "three"
    summary = train(build("ppo", PPO, small_ppo.run(seed=5, seeds=3)), str(run_dir))
    per_seed = summary["per_seed"]
    assert [s["seed"] for s in per_seed] == [5, 6, 7]
    assert summary["final_eval_return"] == pytest.approx(
        sum(s["final_eval_return"] for s in per_seed) / 3
    )
    assert len({s["params_digest"] for s in per_seed}) == 3
    lines = metrics(run_dir)
    evals = [line for line in lines if line["kind"] == "eval" and line["step"] == 1024]
    assert sorted((e["seed"], e["temperature"]) for e in evals) == [(5, 0.0), (6, 0.0), (7, 0.0)]
    assert {line["seed"] for line in lines if line["kind"] == "train"} == {5, 6, 7}

    together = jax.device_get(load_run(str(run_dir))[2].agent_state.params)  # iteration 16
    last = {line["seed"]: line for line in lines if line.get("iteration") == 16}
    for k, seed in enumerate((5, 6, 7)):
        single, single_metrics = _train_params(seed, 1)
        for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(single), strict=True):
            np.testing.assert_allclose(a[k], b[0], rtol=1e-4, atol=1e-6)
        for name in ("loss/total", "ppo/approx_kl"):
            np.testing.assert_allclose(
                last[seed][name], single_metrics[name][0], rtol=1e-3, atol=1e-6
            )


def test_seeds_need_a_jax_environment():
    from heron.agents import ConfigError

    with pytest.raises(ConfigError, match="seeds=2 needs a JAX environment"):
        build("ppo", PPO, small_ppo.run(env="gym:CartPole-v1", seeds=2))


@pytest.mark.parametrize("done_frac, expected", [(0.0, ["12", "14", "16"]), (1e6, ["16"])])
def test_trax_save_rule(tmp_path, done_frac, expected):
    run = small_ppo.run(steps=1024, save_every_n=2, done_frac_for_policy_save=done_frac)
    train(build("ppo", PPO, run), str(tmp_path / "run"))
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints"), key=int) == expected
