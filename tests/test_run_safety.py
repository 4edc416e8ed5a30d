"""Nothing lost on Ctrl-C, concurrent use or a failed start: the run-dir lock, SIGINT and
SIGTERM saving before they stop, a run that failed before its first checkpoint, the best
evaluation's checkpoint, and a hand-edited config refused on resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import small_ppo
from conftest import copy_run
from small_ppo import PPO, build

from heron import api
from heron import policy as heron_policy
from heron.agents import NetworkConfig
from heron.configs import ConfigError
from heron.training import checkpoints, rundir

HERON = os.path.join(os.path.dirname(sys.executable), "heron")
SMALL = [*small_ppo.FLAGS, "--eval-every-n", "4"]


def _start(run_dir, steps, *extra):
    return subprocess.Popen(
        [HERON, "train", "ppo", "--run-dir", str(run_dir), "--steps", str(steps), *SMALL, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, seconds=300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _progress_started(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    return os.path.exists(path) and os.path.getsize(path) > 0


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path):
    run_dir = tmp_path / "run"
    first = _start(run_dir, 400_000)
    try:
        assert _wait_for(lambda: _progress_started(run_dir))
        assert _wait_for(lambda: checkpoints.latest_step(str(run_dir)) is not None)
        second = subprocess.run(
            [HERON, "train", "--resume", str(run_dir)], capture_output=True, text=True, timeout=300
        )
        assert second.returncode == 2
        error = second.stderr.strip()
        assert f"is in use by process {first.pid}" in error and len(error.splitlines()) == 1
        lines_before = open(run_dir / "metrics.jsonl").read()
        assert lines_before  # the first run's metrics are untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=300)
    assert not (run_dir / rundir.LOCK).exists()  # released when it stopped


def test_a_stale_lock_is_taken_over(small_ppo_run, tmp_path):
    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(os.path.join(run_dir, rundir.LOCK), "w") as f:
        json.dump({"pid": dead.pid, "host": os.uname().nodename}, f)
    summary = small_ppo.resume(run_dir, steps=1280)
    assert summary["steps"] == 1280 and not os.path.exists(os.path.join(run_dir, rundir.LOCK))


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """The shared run for 128 iterations without a scheduled checkpoint, in this process:
    what the signalled command-line runs below must end with once resumed."""
    run_dir = tmp_path_factory.mktemp("long") / "run"
    run = small_ppo.run(steps=8192, save_every_n=1000)
    return api.train(build(run_config=run), str(run_dir))


@pytest.mark.parametrize("signal_number, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_a_checkpoint_and_resume_continues_exactly(
    long_run, tmp_path, signal_number, status
):
    expected = long_run
    run_dir = tmp_path / "b"
    process = _start(run_dir, 8192, "--save-every-n", "1000")  # no scheduled checkpoint
    assert _wait_for(lambda: _progress_started(run_dir))
    process.send_signal(signal_number)
    _, err = process.communicate(timeout=300)
    assert process.returncode == status, err
    assert "checkpoint" in err and f"heron train --resume {run_dir}" in err
    saved = checkpoints.latest_step(str(run_dir))
    assert saved is not None and saved < 128  # it stopped before the end, and saved first
    resumed = small_ppo.resume(run_dir)
    assert resumed["params_digest"] == expected["params_digest"]


def test_a_run_that_failed_before_its_first_checkpoint_starts_again_on_resume(
    tmp_path, monkeypatch, capsys
):
    run_dir = str(tmp_path / "run")
    setup = build("ppo", PPO, small_ppo.run())
    program = setup.program()

    def out_of_memory(state, count):
        raise MemoryError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(
        type(setup), "program", lambda self: program._replace(iteration=out_of_memory)
    )
    with pytest.raises(MemoryError):
        api.train(setup, run_dir)
    monkeypatch.undo()
    assert checkpoints.latest_step(run_dir) is None and os.path.exists(f"{run_dir}/config.json")
    with pytest.raises(ConfigError, match="continue it with `heron train --resume`"):
        api.train(build("ppo", PPO, small_ppo.run()), run_dir)  # a fresh start refuses
    resumed = small_ppo.resume(run_dir)  # ... and --resume accepts it: it starts again
    assert "stopped before its first checkpoint: starting it again" in capsys.readouterr().err
    fresh = api.train(build("ppo", PPO, small_ppo.run()), str(tmp_path / "fresh"))
    assert resumed["params_digest"] == fresh["params_digest"]


def test_the_best_evaluation_keeps_its_own_checkpoint(small_ppo_run):
    run_dir = str(small_ppo_run.run_dir)
    evals = [json.loads(x) for x in open(f"{run_dir}/metrics.jsonl") if '"eval"' in x]
    best = max(evals, key=lambda e: e["return_mean"])  # the first of equal bests is kept
    best_step = min(e["step"] for e in evals if e["return_mean"] == best["return_mean"])
    assert checkpoints.all_steps(run_dir, checkpoints.BEST) == [best_step // 64]
    evaluation = api.evaluate_run(run_dir, episodes=2, temperature=0.0, best=True)
    assert evaluation["checkpoint"] == best_step // 64 and evaluation["best"] is True
    policy = heron_policy.load(run_dir, best=True)
    assert policy.checkpoint == best_step // 64


def test_a_hand_edited_config_is_refused_on_resume(small_ppo_run, tmp_path):
    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    path = os.path.join(run_dir, "config.json")
    config = json.load(open(path))
    config["ppo"]["learning_rate"] = 0.01  # keeps every array shape
    config["ppo"]["network"]["activation"] = "relu"
    json.dump(config, open(path, "w"))
    with pytest.raises(ConfigError) as error:
        small_ppo.resume(run_dir, steps=1280)
    message = str(error.value)
    assert "ppo.learning_rate: 0.002 -> 0.01" in message
    assert "ppo.network.activation: 'tanh' -> 'relu'" in message and "--steps" in message
    config["ppo"]["learning_rate"], config["ppo"]["network"]["activation"] = 0.002, "tanh"
    json.dump(config, open(path, "w"))
    assert small_ppo.resume(run_dir, steps=1280)["steps"] == 1280  # a new budget is allowed


def test_the_python_policy_acts_on_raw_observations(tmp_path):
    import numpy as np

    run_dir = str(tmp_path / "run")
    run = small_ppo.run(steps=512, normalize_observations=True, len_history_for_policy=2)
    api.train(build("ppo", PPO, run), run_dir)
    policy = heron_policy.load(run_dir)
    observation = np.zeros(4, np.float32)
    assert policy(observation) in (0, 1)
    assert policy(np.zeros((3, 4))).shape == (3,)
    policy.reset()
    with pytest.raises(ValueError, match=r"does not fit the run's \(4,\)"):
        policy(np.zeros(5))


def test_no_checkpoints_and_no_summaries(tmp_path, capsys):
    from heron.cli import main

    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--run-dir", str(run_dir), "--steps", "512", *SMALL]
    assert main(argv + ["--no-checkpoints", "--no-summaries"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 512 and summary["final_eval_return"] is not None
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "metrics.jsonl").exists()
    assert not (run_dir / "tb").exists()
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert "trained with --no-checkpoints: it has nothing to resume" in capsys.readouterr().err


def _parameters(setup):
    import jax

    from heron.training.driver import seed_keys
    from heron.transfer import leaves_by_path

    state = jax.tree.map(lambda x: x[0], setup.program().init(seed_keys([9])))
    return {p: x for p, x in leaves_by_path(state.agent_state).items() if p[0] == "params"}


def test_init_from_copies_exactly_the_matching_parameters(small_ppo_run, capsys):
    import dataclasses

    import jax
    import numpy as np

    from heron.transfer import leaves_by_path

    source_dir = str(small_ppo_run.run_dir)
    source = leaves_by_path(jax.tree.map(lambda x: x[0], api.load_run(source_dir)[2].agent_state))
    run = small_ppo.run(steps=512, init_from=source_dir)

    same = _parameters(build("ppo", PPO, run))  # fine-tuning: everything copied
    assert "parameters copied, 0 initialised afresh" in capsys.readouterr().err
    for path, leaf in same.items():
        np.testing.assert_array_equal(leaf, source[path])

    recurrent = dataclasses.replace(
        PPO, network=NetworkConfig(core="lstm"), sequence_length=4, batch_size=8
    )
    setup = api.build("ppo", recurrent, run)
    partly = _parameters(setup)
    record = setup.record["init_from"]
    cores = [p for p in partly if "Core_0" in p]
    assert cores and record["fresh"] == len(cores)  # the new LSTM starts afresh
    assert record["copied"] == len(partly) - len(cores)
    for path, leaf in partly.items():
        if path not in cores:  # torsos and heads: copied leaf by leaf
            np.testing.assert_array_equal(leaf, source[path])

    narrower = dataclasses.replace(PPO, network=NetworkConfig(hidden_sizes=(32,)))
    with pytest.raises(ConfigError, match="parameters clash with the run to initialise from"):
        api.build("ppo", narrower, run)


def test_a_resumed_run_does_not_read_the_run_it_was_initialised_from(small_ppo_run, tmp_path):
    import shutil

    source_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    run_dir = str(tmp_path / "run")
    run = small_ppo.run(steps=512, init_from=source_dir)
    api.train(build("ppo", PPO, dataclasses_replace(run, steps=256)), run_dir)
    shutil.rmtree(source_dir)  # gone: its parameters are in the run's checkpoint
    assert api.resume(run_dir, steps=512)["steps"] == 512


def dataclasses_replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def test_a_video_of_the_policy(small_ppo_run, tmp_path, capsys):
    from PIL import Image

    from heron.cli import main

    run_dir = small_ppo_run.run_dir
    out = tmp_path / "cartpole.gif"
    assert main(["eval", str(run_dir), "--episodes", "2", "--video", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    frames = line["video_frames"]
    assert line["video"] == str(out) and frames == line["video_returns"][0] + 1
    with Image.open(out) as gif:
        assert 1 < gif.n_frames <= frames and gif.size[0] > 100  # identical frames merge
    assert main(["eval", str(run_dir), "--video", str(tmp_path / "x.avi")]) == 2
    assert "unknown format .avi; use .gif or .mp4" in capsys.readouterr().err


def test_an_env_without_a_renderer_is_refused_for_video():
    from heron.video import VideoError, render_id

    assert render_id("gymnax:CartPole-v1") == "CartPole-v1"
    with pytest.raises(VideoError, match="'heron:CartPole-masked-v1' cannot be rendered"):
        render_id("heron:CartPole-masked-v1")


def test_a_run_whose_checkpoints_are_gone_keeps_its_history_on_resume(
    small_ppo_run, tmp_path, capsys
):
    """A finished run whose checkpoints/ was removed: --resume refuses in one line (it would
    train again from 0 and overwrite metrics.jsonl) and changes nothing."""
    from heron.cli import main

    run_dir = copy_run(small_ppo_run.run_dir, tmp_path)
    shutil.rmtree(os.path.join(run_dir, "checkpoints"))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        history = f.read()
    assert main(["train", "--resume", run_dir]) == 2
    err = capsys.readouterr().err
    assert "has no checkpoint, yet its metrics.jsonl records training up to step 1024" in err
    assert "nothing was changed" in err and len(err.strip().splitlines()) == 1
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        assert f.read() == history
