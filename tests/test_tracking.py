"""Experiment tracking: ``--wandb`` logs the scalars TensorBoard gets and the run's config to
Weights & Biases; in offline mode (``WANDB_MODE=offline``) into the run directory, read back
here from the run's ``.wandb`` file (LevelDB-style log records of wandb's protobufs).
``--video-every-n`` adds evaluation videos, to both."""

import glob
import hashlib
import json
import os
import subprocess
import sys

import pytest
import small_ppo
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2

from heron.configs import ConfigError
from heron.training import RunConfig

SMALL = ["--steps", "1024", "--eval-every-n", "8", *small_ppo.FLAGS]
_BLOCK, _HEADER = 32768, 7  # the log format's block size and record header (crc, length, type)


def wandb_records(path: str):
    """The protobuf records of a ``.wandb`` file, in order."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    position, payload = _HEADER, b""  # the file's own header: magic and version
    while position + _HEADER <= len(data):
        if _BLOCK - position % _BLOCK < _HEADER:  # a block's tail too short for a header
            position += _BLOCK - position % _BLOCK
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        payload += data[position + _HEADER : position + _HEADER + length]
        position += _HEADER + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            yield record
            payload = b""


def logged(run_dir):
    """(config {key: value}, rows [{key: value}]) of the run's offline wandb run: its config
    from the run record, and a row per ``log`` call from the summary updates that carry
    ``env_steps`` (wandb 0.31 keeps a logged row's values as such an update)."""
    (path,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    config, rows = {}, []
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update(
                {item.key: json.loads(item.value_json) for item in record.run.config.update}
            )
        elif kind == "summary":
            row = {}
            for item in record.summary.update:  # a video's fields arrive as nested keys
                key = item.key or item.nested_key[0]
                value = json.loads(item.value_json)
                if item.nested_key[1:]:
                    row.setdefault(key, {})[item.nested_key[1]] = value
                else:
                    row[key] = value
            if "env_steps" in row:
                rows.append(row)
    return config, rows


def test_wandb_logs_the_runs_scalars_and_config_through_the_real_entry_point(tmp_path):
    run_dir = tmp_path / "run"
    heron = os.path.join(os.path.dirname(sys.executable), "heron")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    result = subprocess.run(
        [
            heron,
            "train",
            "ppo",
            "--run-dir",
            str(run_dir),
            "--wandb",
            "--video-every-n",
            "1",
            *SMALL,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    config, history = logged(run_dir)
    recorded = json.loads((run_dir / "config.json").read_text())
    assert config["run"] == recorded["run"] and config["ppo"] == recorded["ppo"]
    assert config["run"]["wandb"] is True

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if line["kind"] == "train"]
    evals = [line for line in lines if line["kind"] == "eval"]
    logged_train = [h for h in history if "train/return_mean" in h or "loss/total" in h]
    assert [h["env_steps"] for h in logged_train] == [line["step"] for line in train]
    last = logged_train[-1]
    assert last["loss/total"] == pytest.approx(train[-1]["loss/total"])
    assert {"ppo/approx_kl", "train/updates", "train/episodes"} <= set(last)
    greedy = [h for h in history if "eval/return_mean/temperature_0.0" in h]
    assert [h["eval/return_mean/temperature_0.0"] for h in greedy] == pytest.approx(
        [line["return_mean"] for line in evals if line["temperature"] == 0.0]
    )
    # a video of a greedy episode at each evaluation: a GIF, in TensorBoard and in wandb
    steps = [line["step"] for line in evals if line["temperature"] == 0.0]
    gifs = sorted(glob.glob(str(run_dir / "videos" / "step_*.gif")))
    assert [os.path.basename(gif) for gif in gifs] == [f"step_{s:09d}.gif" for s in steps]
    frames = Image.open(gifs[-1])
    assert frames.size == (600, 400) and frames.n_frames >= 9  # CartPole falls after 8 steps
    board = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0})
    board.Reload()
    shown = board.Images("eval/video")
    assert [image.step for image in shown] == steps
    assert shown[-1].encoded_image_string == open(gifs[-1], "rb").read()
    videos = [h for h in history if "eval/video" in h]
    assert [h["env_steps"] for h in videos] == steps
    assert videos[-1]["eval/video"]["_type"] == "video-file"
    digest = hashlib.sha256(open(gifs[-1], "rb").read()).hexdigest()
    assert videos[-1]["eval/video"]["sha256"] == digest
    # the Weights & Biases run's id is kept for a resumed run to log to the same run
    run_id = (run_dir / "wandb" / "wandb_id").read_text().strip()
    assert glob.glob(str(run_dir / "wandb" / f"offline-run-*-{run_id}"))


def test_a_wandb_project_without_wandb_is_refused():
    with pytest.raises(ConfigError, match="add --wandb"):
        RunConfig(wandb_project="mine")


def test_videos_that_could_not_be_made_or_shown_are_refused():
    with pytest.raises(ConfigError, match="'heron:DictCue-v0' cannot be rendered"):
        RunConfig(env="heron:DictCue-v0", video_every_n=1)
    with pytest.raises(ConfigError, match="nothing would show them"):
        RunConfig(video_every_n=1, summaries=False)
    RunConfig(video_every_n=1, summaries=False, wandb=True)  # Weights & Biases shows them
