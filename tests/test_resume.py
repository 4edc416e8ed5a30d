"""Checkpoints, exact resume, several seeds in one program, and the save rule."""

import dataclasses
import json
import os

import pytest

from heron.agents import NetworkConfig, PPOConfig
from heron.api import build, resume, train
from heron.training import RunConfig, checkpoints
from heron.training.checkpoints import CheckpointError

SMALL_PPO = PPOConfig(unroll_length=16, batch_size=32, num_epochs=2)


def small_run(**overrides):
    settings = dict(
        steps=4096,
        num_envs=4,
        eval_every_n=4,
        n_evals=2,
        eval_temperatures=(1.0, 0.0),
        save_every_n=4,
        done_frac_for_policy_save=0.0,
    )
    settings.update(overrides)
    return RunConfig(**settings)


def metrics(run_dir, after_step=-1):
    lines = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [
        {k: v for k, v in line.items() if k != "wall_s"}
        for line in lines
        if line.get("step", 0) > after_step and line["kind"] != "note"
    ]


class Killed(Exception):
    pass


def _train_until_checkpoint(monkeypatch, setup, run_dir, kill_at):
    original = checkpoints.Checkpointer.save

    def save_then_die(self, step, state, record=None):
        original(self, step, state, record)
        if step == kill_at:
            raise Killed

    monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_die)
    with pytest.raises(Killed):
        train(setup, run_dir)
    monkeypatch.setattr(checkpoints.Checkpointer, "save", original)


RECURRENT_PPO = dataclasses.replace(
    SMALL_PPO,
    network=NetworkConfig(core="lstm"),
    use_rollout_state=True,
    sequence_length=4,
    batch_size=8,
)


@pytest.mark.parametrize(
    "overrides, ppo",
    [
        ({}, SMALL_PPO),
        ({"separate_eval": False}, SMALL_PPO),
        ({"normalize_observations": True, "len_history_for_policy": 2}, SMALL_PPO),
        ({"env": "heron:CartPole-masked-v1"}, RECURRENT_PPO),
    ],
)
def test_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch, overrides, ppo):
    run = small_run(**overrides)
    straight = train(build("ppo", ppo, run), str(tmp_path / "straight"))
    interrupted = str(tmp_path / "interrupted")
    _train_until_checkpoint(monkeypatch, build("ppo", ppo, run), interrupted, kill_at=8)
    resumed = resume(interrupted)
    assert resumed["params_digest"] == straight["params_digest"]
    assert resumed["best_eval_return"] == straight["best_eval_return"]
    assert resumed["final_eval_return"] == straight["final_eval_return"]
    assert metrics(interrupted) == metrics(tmp_path / "straight")


def test_gymnasium_resume_restarts_episodes_and_says_so(tmp_path, monkeypatch, capsys):
    run = small_run(env="gym:CartPole-v1", steps=1024)
    run_dir = str(tmp_path / "run")
    _train_until_checkpoint(monkeypatch, build("ppo", SMALL_PPO, run), run_dir, kill_at=8)
    summary = resume(run_dir)
    assert summary["steps"] == 1024
    assert "episodes restart on resume" in capsys.readouterr().err
    notes = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl") if '"note"' in line]
    assert len(notes) == 1 and notes[0]["step"] == 8 * 64


def test_an_interrupted_write_leaves_the_previous_checkpoint(tmp_path):
    run_dir = str(tmp_path / "run")
    summary = train(build("ppo", SMALL_PPO, small_run(steps=1024)), run_dir)
    # What a process killed while writing checkpoint 20 leaves behind: a temporary folder.
    partial = os.path.join(run_dir, "checkpoints", "20.orbax-checkpoint-tmp-1234567")
    os.makedirs(os.path.join(partial, "default"))
    with open(os.path.join(partial, "default", "_METADATA"), "w") as f:
        f.write("{truncated")
    assert checkpoints.latest_step(run_dir) == 16
    from heron.cli import main

    assert main(["eval", run_dir, "--episodes", "2"]) == 0
    assert summary["steps"] == 1024


def test_corrupt_checkpoints_are_a_clear_error_and_nothing_is_overwritten(tmp_path):
    """Every checkpoint damaged (a damaged latest one alone falls back to the one before: see
    tests/test_robustness.py)."""
    run_dir = str(tmp_path / "run")
    train(build("ppo", SMALL_PPO, small_run(steps=1024)), run_dir)
    for step in checkpoints.all_steps(run_dir):
        manifest = os.path.join(run_dir, "checkpoints", str(step), "default", "manifest.ocdbt")
        with open(manifest, "wb") as f:
            f.write(b"garbage")
    before = open(os.path.join(run_dir, "metrics.jsonl")).read()
    with pytest.raises(CheckpointError, match="no readable checkpoint in .*16: the file"):
        resume(run_dir, steps=2048)
    assert open(os.path.join(run_dir, "metrics.jsonl")).read() == before


def test_resume_refuses_a_changed_shape(tmp_path):
    run_dir = str(tmp_path / "run")
    train(build("ppo", SMALL_PPO, small_run(steps=1024)), run_dir)
    config_path = os.path.join(run_dir, "config.json")
    config = json.load(open(config_path))
    config["ppo"]["network"]["hidden_sizes"] = [32, 32]
    json.dump(config, open(config_path, "w"))
    with pytest.raises(CheckpointError, match="does not match"):
        resume(run_dir, steps=2048)


def _train_params(seed, seeds, iterations=16):
    import jax

    from heron.training.driver import seed_keys

    setup = build("ppo", SMALL_PPO, small_run(seed=seed, seeds=seeds))
    program = setup.program()
    state = program.init(seed_keys(setup.seeds))
    for _ in range(iterations):
        state, metrics = program.iteration(state)
    return jax.device_get((state.agent_state.params, metrics))


def test_seeds_in_one_program_equal_single_runs():
    """K seeds vmapped into one program follow the K single runs with the same keys. XLA's
    batched CPU kernels round differently from unbatched ones (about 1 ulp per step), so the
    parameters agree to float tolerance rather than bit for bit."""
    import jax
    import numpy as np

    together, together_metrics = _train_params(5, 3)
    for k, seed in enumerate((5, 6, 7)):
        single, single_metrics = _train_params(seed, 1)
        for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(single), strict=True):
            np.testing.assert_allclose(a[k], b[0], rtol=1e-4, atol=1e-6)
        for name in ("loss/total", "ppo/approx_kl"):
            np.testing.assert_allclose(
                together_metrics[name][k], single_metrics[name][0], rtol=1e-3, atol=1e-6
            )


def test_several_seeds_report_per_seed_lines_and_summary(tmp_path):
    summary = train(
        build("ppo", SMALL_PPO, small_run(steps=1024, seed=5, seeds=2)), str(tmp_path / "both")
    )
    per_seed = summary["per_seed"]
    assert [s["seed"] for s in per_seed] == [5, 6]
    assert summary["final_eval_return"] == pytest.approx(
        sum(s["final_eval_return"] for s in per_seed) / 2
    )
    assert len({s["params_digest"] for s in per_seed}) == 2
    lines = metrics(tmp_path / "both")
    evals = [line for line in lines if line["kind"] == "eval" and line["step"] == 1024]
    assert sorted((e["seed"], e["temperature"]) for e in evals) == [
        (5, 0.0),
        (5, 1.0),
        (6, 0.0),
        (6, 1.0),
    ]
    assert {line["seed"] for line in lines if line["kind"] == "train"} == {5, 6}


def test_seeds_need_a_jax_environment():
    from heron.agents import ConfigError

    with pytest.raises(ConfigError, match="seeds=2 needs a JAX environment"):
        build("ppo", SMALL_PPO, small_run(env="gym:CartPole-v1", seeds=2))


@pytest.mark.parametrize("done_frac, expected", [(0.0, ["12", "14", "16"]), (1e6, ["16"])])
def test_trax_save_rule(tmp_path, done_frac, expected):
    run = small_run(steps=1024, save_every_n=2, done_frac_for_policy_save=done_frac)
    train(build("ppo", SMALL_PPO, run), str(tmp_path / "run"))
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints"), key=int) == expected
