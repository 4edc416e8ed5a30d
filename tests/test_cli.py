import json
import os
import subprocess
import sys

import pytest
import small_ppo
from conftest import copy_run

from heron.cli import main

SMALL = ["--steps", "1024", "--eval-every-n", "8", *small_ppo.FLAGS]


def test_train_eval_and_metrics_through_the_real_entry_point(tmp_path):
    run_dir = tmp_path / "run"
    heron = os.path.join(os.path.dirname(sys.executable), "heron")
    result = subprocess.run(
        [heron, "train", "ppo", "--run-dir", str(run_dir), *SMALL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["run_dir"] == str(run_dir) and summary["steps"] == 1024
    assert len(summary["params_digest"]) == 64
    config = json.loads((run_dir / "config.json").read_text())
    assert config["ppo"]["num_epochs"] == 2 and config["run"]["num_envs"] == 4
    # the default env's preset, with the options given on top
    assert summary["preset"] == config["run"]["preset"] == "ppo/gymnax:CartPole-v1"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {line["kind"] for line in lines} == {"train", "eval"}

    result = subprocess.run(
        [heron, "eval", str(run_dir), "--episodes", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    evaluation = json.loads(result.stdout.strip().splitlines()[-1])
    assert evaluation["episodes"] == 3 and evaluation["steps"] == 1024
    assert evaluation["params_digest"] == summary["params_digest"]
    assert evaluation["temperature"] == 0.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "foo"], "unknown algorithm 'foo'; available: crr, dqn, ppo, sac, svg0"),
        (["train", "ppo", "--env", "CartPole-v1"], "environment ids carry their source"),
        (["train", "ppo", "--env", "gymnax:Nope-v0"], "unknown gymnax environment 'Nope-v0'"),
        (["train", "ppo", "--env", "dict_envs:TextPartEnv"], "unsupported part 'mission'"),
        (["train", "ppo", "--ppo.discount", "1.5"], r"ppo.discount must be in [0, 1], got 1.5"),
        (
            ["train", "ppo", "--ppo.gamma", "0.9"],
            "--ppo.gamma is no longer an option: use --ppo.discount",
        ),
        (
            ["train", "ppo", "--ppo.optimizer-batch-size", "64"],
            "use --ppo.batch_size (now counted in sequences, not steps)",
        ),
        (["train", "ppo", "--replay", "uniform"], "ppo cannot learn from the 'uniform' replayer"),
        (["train", "ppo", "--updates-per-iteration", "5"], "updates_per_iteration sets"),
        (["train", "ppo", "--stop-at-return", "inf"], "stop_at_return must be a finite number"),
        (
            ["train", "ppo", "--ppo.use-rollout-state"],
            "ppo.use_rollout_state needs a recurrent core",
        ),
        (
            ["train", "ppo", "--eval-temperatures", "inf"],
            "eval_temperatures must be one or more finite",
        ),
        (["train", "ppo", "--ppo.gae-lambda", "-0.5"], "ppo.gae_lambda must be in [0, 1]"),
        (["train", "ppo", "--ppo.clip-range", "0"], "ppo.clip_range must be > 0, got 0.0"),
        (
            ["train", "ppo", "--ppo.epsilon", "0.1"],
            "--ppo.epsilon is no longer an option: use --ppo.clip_range",
        ),
        (["train", "ppo", "--steps", "0"], "steps must be >= 1, got 0"),
        (
            ["train", "ppo", "--ppo.batch-size", "300"],
            "ppo.batch_size=300 sequences must divide the 1024",
        ),
        (
            ["train", "ppo", "--controller", "plateau(learning_rte, 0.5, 3)"],
            "sets ['learning_rte']",
        ),
        (["train", "ppo", "--ppo.vocab-size", "100000000"], "ppo.vocab_size must be in [2, 65536]"),
        (["train", "crr", "--crr.replay.ratio", "inf"], "crr.replay.ratio must be a finite number"),
        (["train", "ppo", "--ppo.learning-rate", "inf"], "ppo.learning_rate must be finite > 0"),
        (["train", "ppo", "--ppo.boundary", "20"], "--ppo.boundary is no longer an option: use"),
        (["train"], "heron train needs an algorithm"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["collect", "no-such-run", "--episodes", "2", "--out", "x"], "'no-such-run' does not"),
        (["train", "crr", "--dataset", "no-such-data"], "dataset 'no-such-data' does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    run_dir = tmp_path / "refused"
    if argv[0] == "train" and len(argv) > 1:
        argv = argv + ["--run-dir", str(run_dir)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not run_dir.exists()  # nothing written for a refused command


@pytest.mark.parametrize(
    "text, algo, message",
    [
        ('algo = "ppo"\n[foo]\nx = 1\n', None, "has unknown section 'foo': a ppo config has"),
        ('algo = "ppo"\n[dqn]\nbatch_size = 8\n', None, "has unknown section 'dqn'"),
        ('algo = "ppo"\n[ppo]\nbatch_sise = 8\n', None, "batch_sise"),
        ("[run]\nsteps = 64\n", None, "names no algorithm: add algo = NAME (one of crr, dqn,"),
        ('algo = "dqn"\n', "ppo", "configures dqn, not ppo"),
    ],
)
def test_config_files_with_unknown_sections_or_no_algorithm_are_refused(
    text, algo, message, tmp_path, capsys
):
    path = tmp_path / "config.toml"
    path.write_text(text)
    run_dir = tmp_path / "refused"
    argv = ["train", *([algo] if algo else []), "--config", str(path), "--run-dir", str(run_dir)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not run_dir.exists()


def test_a_config_file_without_algo_takes_the_command_lines():
    from heron.api import configs_from_record

    algo, config, run = configs_from_record({"run": {"steps": 64}}, "f.toml", "ppo")
    assert algo == "ppo" and run.steps == 64 and type(config).__name__ == "PPOConfig"


def test_eval_of_missing_or_empty_run_dir(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["eval", str(tmp_path / "empty")]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_eval_of_a_run_without_checkpoints(small_ppo_run, tmp_path, capsys):
    import shutil

    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    for step in os.listdir(os.path.join(run_dir, "checkpoints")):
        shutil.rmtree(os.path.join(run_dir, "checkpoints", step))
    assert main(["eval", run_dir]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_schedules_from_the_command_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = [
        "train",
        "ppo",
        "--run-dir",
        str(run_dir),
        *SMALL,
        "--ppo.entropy-cost",
        "linear(0.01, 0.0, 32)",
    ]
    assert main(argv) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["ppo"]["entropy_cost"] == "linear(0.01, 0.0, 32)"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    values = [line["schedule/entropy_cost"] for line in lines if line["kind"] == "train"]
    # A line per call of 4 iterations of 4 updates: the value in effect is the last
    # iteration's, the mean of updates 12..15.
    assert values[0] == pytest.approx(0.01 * (1 - 13.5 / 32), rel=1e-5)
    assert values[-1] == 0.0  # 64 updates in all: the schedule ended after 32
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "ppo",
                "--ppo.entropy-cost",
                "cosine(1, 0)",
                "--run-dir",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "bad schedule 'cosine(1, 0)'" in err and "accepted forms" in err
    assert err.count("\n") == 1


def test_plot_command(small_ppo_run, tmp_path, capsys):
    run_dir = small_ppo_run.run_dir
    out = tmp_path / "curves.png"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["runs"] == 1 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bool_options_read_as_flags_or_with_a_value():
    from heron.cli import _parse_train

    _, config, run = _parse_train(["svg0", "--svg0.prior", "--separate-eval"])
    assert config.prior is True and run.separate_eval is True
    _, config, run = _parse_train(["svg0", "--svg0.prior", "False", "--separate-eval", "False"])
    assert config.prior is False and run.separate_eval is False
    argv = ["ppo", "--ppo.use-rollout-state", "--ppo.network.core", "lstm"]
    _, config, _ = _parse_train(argv + ["--ppo.sequence-length", "4"])
    assert config.use_rollout_state is True and config.network.core == "lstm"


@pytest.mark.parametrize(
    "argv, message, prog",
    [
        (["train", "ppo", "--foo", "3"], "Unrecognized options: --foo, 3", "heron train ppo"),
        (
            ["train", "ppo", "--steps", "x"],
            "Error parsing --steps: invalid literal",
            "heron train ppo",
        ),
        (
            ["train", "crr", "--crr.network.core", "tcn"],
            "invalid choice 'tcn'",
            "heron train crr",
        ),
        (["collect", "runs/x"], "Missing from heron collect: --episodes INT", "heron collect"),
    ],
)
def test_parse_errors_are_one_line(argv, message, prog, capsys):
    """tyro's own parse errors too: one line naming the problem, exit status 2."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert error.startswith("heron: error: ") and "\n" not in error, error
    assert message in error and error.endswith(f"(see `{prog} --help`)"), error
    assert captured.out == ""
