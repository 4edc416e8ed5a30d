"""``heron tune``: Optuna over an algorithm's search space, every trial a normal run
directory, the study resumable from its SQLite file, the best trial written as a preset
entry, and trials below the median pruned at their evaluations."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tomllib

import optuna
import pytest
import small_ppo

from heron import tune
from heron.agents import PPOConfig
from heron.configs import from_values

HERON = os.path.join(os.path.dirname(sys.executable), "heron")
# The small PPO run's settings, 512 steps a trial; num_epochs and the network are sampled.
SMALL = ["--steps", "512", "--eval-every-n", "4", "--no-checkpoints", *small_ppo.FLAGS]


def heron_tune(*argv, cwd):
    result = subprocess.run(
        [HERON, "tune", "ppo", *argv], capture_output=True, text=True, timeout=600, cwd=cwd
    )
    return result.returncode, result.stdout, result.stderr


def test_a_study_runs_resumes_and_writes_its_best_trial_as_a_preset(tmp_path):
    study = tmp_path / "study"
    code, out, err = heron_tune("--trials", "2", "--study-dir", str(study), *SMALL, cwd=tmp_path)
    assert code == 0, err
    first = json.loads(out.strip().splitlines()[-1])
    assert first["trials"] == first["complete"] == 2
    code, out, err = heron_tune("--trials", "3", "--study-dir", str(study), *SMALL, cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["trials"] == summary["complete"] == 3  # one more, the first two kept
    assert sorted(os.listdir(study)) == [
        "best_preset.toml", "study.db", "trial_000", "trial_001", "trial_002"
    ]  # fmt: skip
    values = []
    for n in range(3):  # every trial a normal run: its config, metrics and final line
        run_dir = study / f"trial_{n:03d}"
        config = json.loads((run_dir / "config.json").read_text())
        assert config["run"]["steps"] == 512 and config["ppo"]["unroll_length"] == 16
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        greedy = [line for line in lines if line["kind"] == "eval"]
        values.append(greedy[-1]["return_mean"])
    assert summary["best_value"] == pytest.approx(max(values))
    assert summary["best_run_dir"] == str(study / f"trial_{summary['best_trial']:03d}")

    # the preset entry: the best trial's whole config, as heron/presets/ppo.toml holds them
    with open(study / "best_preset.toml", "rb") as f:
        entry = tomllib.load(f)["gymnax:CartPole-v1"]
    assert entry["run"]["steps"] == 512 and entry["run"]["num_envs"] == 4
    preset = from_values(PPOConfig, entry["ppo"], PPOConfig())
    best = json.loads((study / f"trial_{summary['best_trial']:03d}" / "config.json").read_text())
    assert json.loads(json.dumps(dataclasses.asdict(preset))) == best["ppo"]
    for name, value in summary["best_params"].items():
        *parents, leaf = name.split(".")
        node = best["ppo"]
        for parent in parents:
            node = node[parent]
        assert node[leaf] == pytest.approx(value)


def test_a_trial_below_the_median_is_pruned_at_its_evaluation(tmp_path):
    """A study whose one earlier trial scored 500 at every evaluation: the next trial's
    first greedy evaluation (an untrained CartPole policy) is below that median."""
    study_dir = tmp_path / "study"
    os.makedirs(study_dir)
    storage = f"sqlite:///{study_dir / tune.STORAGE}"
    study = optuna.create_study(study_name=tune.STUDY_NAME, storage=storage, direction="maximize")
    distributions = {"learning_rate": optuna.distributions.FloatDistribution(1e-5, 1e-2, log=True)}
    study.add_trial(
        optuna.trial.create_trial(
            params={"learning_rate": 1e-3},
            distributions=distributions,
            value=500.0,
            intermediate_values={step: 500.0 for step in range(256, 2049, 256)},
        )
    )
    run = small_ppo.run(steps=2048, eval_every_n=4, checkpoints=False)
    config = tune.TuneConfig(trials=2, timeout=None, study_dir=str(study_dir), startup_trials=1)
    summary = tune.tune("ppo", small_ppo.PPO, run, config)
    assert summary["pruned"] == 1 and summary["complete"] == 1
    lines = [
        json.loads(line)
        for line in (study_dir / "trial_001" / "metrics.jsonl").read_text().splitlines()
    ]
    assert max(line["step"] for line in lines) == 256  # stopped at its first evaluation


def test_what_tune_refuses(tmp_path):
    from heron.cli import main

    assert main(["tune", "ppo", "--steps", "512"]) == 2  # no --trials
    assert main(["tune", "crr", "--trials", "1", "--study-dir", str(tmp_path / "s")]) == 2
    run = small_ppo.run(controller="plateau(learning_rate, 0.5, 3)")
    config = tune.TuneConfig(trials=1, timeout=None, study_dir=str(tmp_path / "s"))
    with pytest.raises(tune.TuneError, match="--controller"):
        tune.tune("ppo", small_ppo.PPO, run, config)
