"""Nothing lost on bad input or faults: each repro of issue 14 that lives outside the driver
(datasets, checkpoints, OS errors, environment ids, typos, TensorBoard, dependencies)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import tomllib

import gymnasium
import numpy as np
import orbax.checkpoint as ocp
import pytest
import small_ppo
from conftest import copy_run
from hypothesis import given, settings
from hypothesis import strategies as st

from heron import envs
from heron.cli import describe_os_error, main
from heron.offline import DatasetError, Episode, read_dataset, write_dataset
from heron.offline.dataset import FIELDS, Dataset, content_hash, estimated_size
from heron.training import checkpoints
from heron.training.checkpoints import CheckpointError
from heron.training.logging import RunLogger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--steps", "128", "--eval-every-n", "1", "--save-every-n", "1",
    "--done-frac-for-policy-save", "0", *small_ppo.FLAGS,
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """PPO on gymnax CartPole for 2 iterations of 64 steps, a checkpoint after each
    (a resumption of it is compared with one of a copy)."""
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["train", "ppo", "--run-dir", str(run_dir), *TINY]) == 0
    assert checkpoints.all_steps(str(run_dir)) == [1, 2]
    return run_dir


def one_error_line(err: str) -> str:
    """The one error line of a command's stderr (progress lines aside), nothing else."""
    lines = [line for line in err.splitlines() if not line.startswith("[heron] ")]
    assert len(lines) == 1 and lines[0].startswith("heron: error: "), err
    return lines[0]


# --------------------------------------------------------------------------- datasets


def cartpole_episodes(lengths=(3, 2), seed=0):
    rng = np.random.default_rng(seed)
    episodes = []
    for length in lengths:
        terminations = np.zeros(length, bool)
        terminations[-1] = True
        episodes.append(
            Episode(
                observations=rng.normal(size=(length + 1, 4)).astype(np.float32),
                actions=rng.integers(0, 2, size=length).astype(np.int32),
                rewards=np.ones(length, np.float32),
                terminations=terminations,
                truncations=np.zeros(length, bool),
                extras={"log_prob": rng.normal(size=length + 1).astype(np.float32)},
            )
        )
    return episodes


SPACES = (
    gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32),
    gymnasium.spaces.Discrete(2),
)


def test_collect_to_a_relative_out(tiny_run, tmp_path, monkeypatch, capsys):
    """The README's `heron collect RUN --out data/cp`: before, FileNotFoundError
    'data/cp/data/cp/main_data.hdf5' after the rollouts, and an empty dataset left behind."""
    monkeypatch.chdir(tmp_path)
    assert main(["collect", str(tiny_run), "--episodes", "3", "--out", "data/cp"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    dataset = read_dataset(tmp_path / "data" / "cp")
    assert summary["out"] == "data/cp" and dataset.num_episodes == 3 == summary["episodes"]
    assert sorted(os.listdir(tmp_path / "data")) == ["cp"]  # no temporary folder left


def test_a_failed_write_leaves_nothing_and_the_next_try_works(tmp_path):
    target = tmp_path / "data" / "cp"
    episodes = cartpole_episodes()
    with pytest.raises(TypeError, match="not JSON serializable"):  # fails after the arrays
        write_dataset(target, episodes, *SPACES, metadata={"note": object()})
    assert not target.exists() and os.listdir(tmp_path / "data") == []
    write_dataset(target, episodes, *SPACES, metadata={"note": "second try"})
    assert read_dataset(target).metadata["note"] == "second try"


def test_writing_into_an_existing_empty_or_unrelated_directory(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    write_dataset(empty, cartpole_episodes(), *SPACES)
    assert read_dataset(empty).num_episodes == 2
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    write_dataset(busy, cartpole_episodes(), *SPACES)
    assert (busy / "notes.txt").read_text() == "mine" and read_dataset(busy).num_steps == 5
    assert sorted(os.listdir(tmp_path)) == ["busy", "empty"]


def test_a_leftover_empty_dataset_is_named_as_such(tmp_path):
    leftover = tmp_path / "cp"
    leftover.mkdir()
    (leftover / "metadata.json").write_text(json.dumps({"total_episodes": 0}))
    with pytest.raises(DatasetError, match="an empty one, left by a failed write: remove it"):
        write_dataset(leftover, cartpole_episodes(), *SPACES)


@pytest.mark.parametrize(
    "out, message",
    [
        ("/dev/null/x", "cannot write '/dev/null/x': '/dev/null' is not a directory"),
        ("{file}", "exists and is not a directory"),
        ("{file}/sub", "is not a directory"),
    ],
)
def test_unwritable_out_is_refused_before_the_rollouts(tiny_run, tmp_path, capsys, out, message):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = out.format(file=a_file)
    assert main(["collect", str(tiny_run), "--episodes", "2", "--out", out]) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert a_file.read_text() == "x"


def test_a_full_disk_is_refused_before_hdf5_writes(tmp_path, monkeypatch, capsys):
    """HDF5 crashes the process (SIGSEGV) when a disk fills mid-write: the free space is
    checked first (measured on a 100 KB tmpfs: before, a segmentation fault)."""
    free = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free._replace(free=50_000))
    with pytest.raises(OSError) as raised:
        write_dataset(tmp_path / "cp", cartpole_episodes(), *SPACES)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "cp")
    assert "the dataset needs about 1.1 MB, 0.1 MB are free" in raised.value.strerror
    assert os.listdir(tmp_path) == []


def test_estimated_size_covers_what_is_written(tmp_path):
    episodes = cartpole_episodes(lengths=(50,) * 40)
    write_dataset(tmp_path / "cp", episodes, *SPACES)
    written = sum(f.stat().st_size for f in (tmp_path / "cp").iterdir())
    assert written <= estimated_size(episodes) <= 4 * written


# --------------------------------------------------------------------------- content hash


def reference_hash(episodes) -> str:
    """The documented definition, field by field in a plain loop."""
    digest = hashlib.sha256()
    for episode in episodes:
        fields = [(name, getattr(episode, name)) for name in FIELDS]
        fields += [(f"infos/{name}", episode.extras[name]) for name in sorted(episode.extras)]
        for name, array in fields:
            array = np.asarray(array)
            digest.update(f"{name}|{array.dtype.str}|{array.shape};".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def as_dataset(episodes) -> Dataset:
    return Dataset(list(episodes), *SPACES)


def test_content_hash_of_rewritten_identical_data_is_equal(tmp_path):
    episodes = cartpole_episodes()
    write_dataset(tmp_path / "a", episodes, *SPACES, metadata={"note": "a"})
    write_dataset(tmp_path / "b", episodes, *SPACES, metadata={"note": "b"})
    a, b = read_dataset(tmp_path / "a"), read_dataset(tmp_path / "b")
    assert content_hash(a) == content_hash(b) == content_hash(as_dataset(episodes))
    assert content_hash(a) == reference_hash(episodes)
    assert re.fullmatch(r"[0-9a-f]{64}", content_hash(a))


def test_content_hash_changes_with_one_action(tmp_path):
    episodes = cartpole_episodes()
    write_dataset(tmp_path / "a", episodes, *SPACES)
    changed = [episodes[0], episodes[1]._replace(actions=1 - episodes[1].actions)]
    changed[1].actions[1:] = episodes[1].actions[1:]  # only the first action differs
    write_dataset(tmp_path / "b", changed, *SPACES)
    assert content_hash(read_dataset(tmp_path / "a")) != content_hash(read_dataset(tmp_path / "b"))


@settings(max_examples=40, deadline=None)
@given(
    field=st.sampled_from([*FIELDS, "infos/log_prob"]),
    episode=st.integers(0, 1),
    position=st.integers(0, 10),
)
def test_content_hash_changes_with_any_single_entry(field, episode, position):
    episodes = cartpole_episodes()
    base = content_hash(as_dataset(episodes))
    assert base == reference_hash(episodes)
    changed = [e._replace(extras=dict(e.extras)) for e in episodes]
    target = changed[episode]
    array = (
        target.extras["log_prob"] if field.startswith("infos/") else getattr(target, field)
    ).copy()
    index = position % len(array)
    array[index] = ~array[index] if array.dtype == bool else array[index] + 1
    if field.startswith("infos/"):
        target.extras["log_prob"] = array
    else:
        changed[episode] = target._replace(**{field: array})
    assert content_hash(as_dataset(changed)) != base


def test_content_hash_sees_episode_order_boundaries_and_dtypes():
    episodes = cartpole_episodes(lengths=(3, 2))
    base = content_hash(as_dataset(episodes))
    assert content_hash(as_dataset(episodes[::-1])) != base
    # the same rewards, terminations and truncations bytes with another episode split
    ones = [e._replace(rewards=np.ones_like(e.rewards)) for e in cartpole_episodes((2, 2))]
    assert content_hash(as_dataset(ones[:1])) != content_hash(as_dataset(ones[1:]))
    wider = [e._replace(actions=e.actions.astype(np.int64)) for e in episodes]
    assert content_hash(as_dataset(wider)) != base


# --------------------------------------------------------------------------- checkpoints


def damage(run_dir: str, step: int) -> None:
    """Flips one byte of the largest data file of checkpoint ``step``."""
    folder = os.path.join(run_dir, "checkpoints", str(step))
    files = [os.path.join(root, f) for root, _, names in os.walk(folder) for f in names]
    largest = max((f for f in files if "/d/" in f), key=os.path.getsize)
    with open(largest, "r+b") as f:
        f.seek(os.path.getsize(largest) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_digests_are_written_and_verified(tiny_run):
    for step in checkpoints.all_steps(str(tiny_run)):
        assert checkpoints.verify(str(tiny_run), step) is None
        digest = os.path.join(tiny_run, "checkpoints", str(step), checkpoints.DIGEST_FILE)
        assert len(json.load(open(digest))) >= 5  # every file orbax wrote


def test_a_corrupt_latest_checkpoint_falls_back_and_resume_completes(tiny_run, tmp_path, capsys):
    intact = copy_run(tiny_run, tmp_path / "intact")
    damaged = copy_run(tiny_run, tmp_path / "damaged")
    damage(damaged, 2)
    reason = checkpoints.verify(damaged, 2)
    assert re.fullmatch(r"the file 'default/.*' changed since it was written", reason)

    assert main(["eval", damaged, "--episodes", "2"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["checkpoint"] == 1
    warning = [line for line in captured.err.splitlines() if "warning" in line]
    assert warning == [
        f"heron: warning: checkpoint 2 in {damaged!r} is unreadable ({reason}); "
        "restored checkpoint 1 instead"
    ]
    assert "Traceback" not in captured.err

    # resuming from checkpoint 1 redoes iteration 2 exactly (JAX env): same result as the
    # intact copy resumed from checkpoint 2
    assert main(["train", "--resume", damaged, "--steps", "192"]) == 0
    from_fallback = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", "--resume", intact, "--steps", "192"]) == 0
    from_intact = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_fallback["params_digest"] == from_intact["params_digest"]
    assert os.listdir(os.path.join(damaged, checkpoints.UNREADABLE_DIR)) == ["2"]
    if os.path.isdir(os.path.join(damaged, "best", "2")):  # the best evaluation was at 2
        assert os.listdir(os.path.join(damaged, checkpoints.SUPERSEDED_BEST_DIR)) == ["2"]
    assert checkpoints.all_steps(damaged) == [1, 2, 3]
    assert all(checkpoints.verify(damaged, s) is None for s in (1, 2, 3))


def test_a_checkpoint_without_digest_damaged_for_orbax_falls_back_quietly(
    tiny_run, tmp_path, capsys
):
    """Checkpoints written before digests: orbax's own failure is the reason, in one line,
    and none of its tracebacks or log lines."""
    run_dir = copy_run(tiny_run, tmp_path)
    os.remove(os.path.join(run_dir, "checkpoints", "2", checkpoints.DIGEST_FILE))
    with open(os.path.join(run_dir, "checkpoints", "2", "default", "manifest.ocdbt"), "wb"):
        pass  # emptied
    assert main(["eval", run_dir, "--episodes", "2"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["checkpoint"] == 1
    assert captured.err.count("heron: warning: checkpoint 2") == 1
    assert "cannot be read" in captured.err
    assert "Traceback" not in captured.err and "absl" not in captured.err


def test_no_readable_checkpoint_is_one_line(tiny_run, tmp_path, capsys):
    run_dir = copy_run(tiny_run, tmp_path)
    damage(run_dir, 1)
    shutil.rmtree(os.path.join(run_dir, "checkpoints", "2", "default"))
    assert main(["eval", run_dir]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "no readable checkpoint in" in error
    assert "2: its folder has no default/_METADATA (an incomplete write or copy)" in error
    assert "1: the file 'default/" in error


def test_a_changed_shape_is_still_named_as_such(tiny_run, tmp_path, capsys):
    run_dir = copy_run(tiny_run, tmp_path)
    config = json.load(open(os.path.join(run_dir, "config.json")))
    config["run"]["num_envs"] = 8
    json.dump(config, open(os.path.join(run_dir, "config.json"), "w"))
    assert main(["train", "--resume", run_dir, "--steps", "256"]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "checkpoint 2 in" in error and "does not match its config.json" in error
    assert re.search(r"has shape \(1, 4[,)].*the config gives \(1, 8[,)]", error), error


def test_restore_of_a_named_step(tiny_run, tmp_path):
    run_dir = copy_run(tiny_run, tmp_path)
    from heron.api import load_run

    _, _, template, latest = load_run(run_dir)
    assert latest == 2
    _, step = checkpoints.restore(run_dir, template, step=1)
    assert step == 1
    with pytest.raises(CheckpointError, match=r"no checkpoint 7 in .*; it holds 1, 2"):
        checkpoints.restore(run_dir, template, step=7)
    damage(run_dir, 1)
    with pytest.raises(CheckpointError, match="checkpoint 1 in .* is unreadable: the file"):
        checkpoints.restore(run_dir, template, step=1)


def test_a_full_disk_while_saving_keeps_the_older_checkpoints(tmp_path, monkeypatch, capsys):
    """tensorstore reports a full disk as a ValueError with os_error_code=28 (the message
    below is the one seen on a full 600 KB tmpfs): one line, exit 1, older checkpoints intact
    and no partial folder left."""
    original = ocp.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == 2 and os.path.basename(str(self.directory)) == "checkpoints":
            os.makedirs(os.path.join(str(self.directory), "2.orbax-checkpoint-tmp"))
            raise ValueError(
                'RESOURCE_EXHAUSTED: Error writing "stats.return_sum/0" in OCDBT database: '
                "Failed to write 76003 bytes to file 21: No space left on device "
                "[os_error_code='28']"
            )
        return original(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "--run-dir", str(run_dir), *TINY]) == 1
    error = one_error_line(capsys.readouterr().err)
    assert error == (
        f"heron: error: '{run_dir / 'checkpoints'}': No space left on device; checkpoint 2 "
        "was not written (older ones are intact) (ENOSPC)"
    )
    assert os.listdir(run_dir / "checkpoints") == ["1"]
    assert checkpoints.verify(str(run_dir), 1) is None


def test_continuing_a_run_removes_partial_checkpoint_folders(tiny_run, tmp_path, capsys):
    """A killed process or a full disk leaves orbax's temporary folder; reading the run
    leaves it alone, writing to it again removes it."""
    run_dir = copy_run(tiny_run, tmp_path)
    partial = os.path.join(run_dir, "checkpoints", "3.orbax-checkpoint-tmp-1234")
    os.makedirs(os.path.join(partial, "default"))
    assert main(["eval", run_dir, "--episodes", "1"]) == 0
    assert os.path.isdir(partial)
    assert main(["train", "--resume", run_dir, "--steps", "192"]) == 0
    assert not os.path.exists(partial) and checkpoints.all_steps(run_dir) == [1, 2, 3]


# --------------------------------------------------------------------------- OS errors


def test_run_dir_naming_a_file(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(["train", "ppo", "--run-dir", str(a_file), *TINY]) == 1
    assert one_error_line(capsys.readouterr().err) == (
        f"heron: error: '{a_file}': Not a directory (ENOTDIR)"
    )
    assert main(["train", "ppo", "--run-dir", str(a_file / "run"), *TINY]) == 1
    assert "Not a directory (ENOTDIR)" in one_error_line(capsys.readouterr().err)
    assert a_file.read_text() == "x"


def test_a_read_only_run_dir(tmp_path, monkeypatch, capsys):
    """EROFS where the run dir is made (seen on a read-only mount; chmod does not stop
    root, so the OS error is raised here)."""
    run_dir = str(tmp_path / "ro" / "run")
    makedirs = os.makedirs

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", read_only)
    assert main(["train", "ppo", "--run-dir", run_dir, *TINY]) == 1
    assert one_error_line(capsys.readouterr().err) == (
        f"heron: error: '{run_dir}': Read-only file system (EROFS)"
    )


@pytest.mark.parametrize(
    "error, line",
    [
        (OSError(errno.ENOSPC, "No space left on device", "runs/x/metrics.jsonl"),
         "'runs/x/metrics.jsonl': No space left on device (ENOSPC)"),
        (PermissionError(errno.EACCES, "Permission denied", "a", None, "b"),
         "'a' -> 'b': Permission denied (EACCES)"),
        (OSError("handle is closed"), "handle is closed"),
        (OSError(), "OSError"),
    ],
)  # fmt: skip
def test_describe_os_error(error, line):
    assert describe_os_error(error) == line


def test_a_full_disk_under_metrics_names_the_file(tmp_path):
    os.symlink("/dev/full", tmp_path / "metrics.jsonl")  # every write: ENOSPC
    logger = RunLogger(str(tmp_path), 10, tensorboard=False)
    with pytest.raises(OSError) as raised:
        logger.write({"kind": "train", "step": 1, "loss": 0.5})
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "metrics.jsonl")


# --------------------------------------------------------------------------- environment ids


def block(monkeypatch, *modules):
    """Makes ``modules`` unimportable, as on a machine without them."""
    for name in list(sys.modules):
        if name.startswith("gymnasium.envs.box2d") or name.startswith("gymnasium.envs.mujoco"):
            monkeypatch.delitem(sys.modules, name)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize(
    "env_id, blocked, message",
    [
        ("gym:LunarLander-v3", ["Box2D"], 'cannot make gym:LunarLander-v3: it needs Box2D, which '
         'is not installed; install gymnasium\'s box2d extra: pip install "gymnasium[box2d]" '
         "(Box2D builds with swig: `pip install swig` first)"),
        ("gym:Ant-v5", ["mujoco"], "cannot make gym:Ant-v5: it needs MuJoCo, which is not "
         'installed; install heron\'s mujoco extra: pip install "heron[mujoco]"'),
        ("gym:Ant-v3", [], "gym:Ant-v3 is not supported: gymnasium's mujoco-py based v2/v3 "
         "environments moved to gymnasium-robotics; use the v5 id"),
        ("gym:GymV26Environment-v0", [], "is not supported: it wraps an environment of the "
         "old gym package"),
    ],
)  # fmt: skip
def test_ids_heron_cannot_build_are_one_line(env_id, blocked, message, tmp_path, monkeypatch,
                                             capsys):  # fmt: skip
    block(monkeypatch, *blocked)
    with pytest.raises(envs.EnvUnavailableError) as raised:
        envs.make(env_id, 2)
    assert message in str(raised.value)
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "--env", env_id, "--run-dir", str(run_dir)]) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert not run_dir.exists()
    assert main(["check-env", env_id]) == 2
    assert message in one_error_line(capsys.readouterr().err)


def test_an_id_that_downloads_its_data(monkeypatch):
    import urllib.error

    from gymnax.utils import load_mnist

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(load_mnist, "_download", offline)
    with pytest.raises(envs.EnvUnavailableError) as raised:
        envs.make("gymnax:MNISTBandit-bsuite")
    assert str(raised.value) == (
        "cannot make gymnax:MNISTBandit-bsuite: it downloads the MNIST data set when it is "
        "made, and the download failed ([Errno -2] Name or service not known); ids that need "
        "network access are not supported offline"
    )


# --------------------------------------------------------------------------- typos


@pytest.mark.parametrize(
    "argv, suggestion",
    [
        (["train", "ppo", "--ppo.discout", "0.9"], "did you mean --ppo.discount?"),
        (["train", "ppo", "--discount", "0.9"], "did you mean --ppo.discount?"),
        (["train", "ppo", "--stepz", "3", "--ppo.discout", "0.9"],
         "did you mean --steps for --stepz, --ppo.discount for --ppo.discout?"),
        (["eval", "runs/x", "--episdes", "3"], "did you mean --episodes?"),
        (["check-env", "gym:CartPole-v1", "--step", "3"], "did you mean --steps"),
    ],
)  # fmt: skip
def test_typos_keep_tyros_suggestion(argv, suggestion, capsys):
    assert main(argv) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "Unrecognized options" in error and suggestion in error


def test_an_unknown_option_without_a_near_match_has_no_suggestion(capsys):
    assert main(["train", "crr", "--crr.lr", "3"]) == 2
    assert "did you mean" not in one_error_line(capsys.readouterr().err)


# --------------------------------------------------------------------------- TensorBoard


def read_events(folder: str) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from the TensorBoard event files in ``folder`` (TFRecords of
    Event protos, read with tensorboardX's proto)."""
    from tensorboardX.proto.event_pb2 import Event

    scalars: dict[str, list[tuple[int, float]]] = {}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("events"):
            continue
        data = open(os.path.join(folder, name), "rb").read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_one_tensorboard_curve_per_seed(tmp_path):
    """--seeds 8 wrote every seed under one tag: a zig-zag. Now tb/seed_<k>/, same tags."""
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--run-dir", str(run_dir), "--seeds", "3", *TINY]
    assert main(argv) == 0
    assert sorted(os.listdir(run_dir / "tb")) == ["seed_0", "seed_1", "seed_2"]
    metrics = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    for seed in range(3):
        scalars = read_events(str(run_dir / "tb" / f"seed_{seed}"))
        evals = [r for r in metrics if r["kind"] == "eval" and r["seed"] == seed]
        assert scalars["eval/return_mean/temperature_0.0"] == [
            (r["step"], pytest.approx(r["return_mean"])) for r in evals
        ]
        # one point per step, the seed's own: no zig-zag
        assert scalars["train/iteration"] == [(64, 1.0), (128, 2.0)]


def test_one_seed_writes_to_tb_itself(tmp_path):
    logger = RunLogger(str(tmp_path), 10, seeds=1)
    logger.write({"kind": "train", "step": 1, "seed": 0, "loss": 0.5})
    logger.write({"kind": "note", "step": 1, "wall_s": 2.0, "message": "hello"})
    logger.close()
    assert read_events(str(tmp_path / "tb")) == {"train/loss": [(1, 0.5)]}


def test_tensorboard_is_a_pinned_dependency():
    """`tensorboard --logdir runs`, as the README says, after `make train` / `make test`:
    every dependency pinned, and every pin in constraints.txt."""
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    pins = dict(
        line.strip().split("==")
        for line in open(os.path.join(ROOT, "constraints.txt"))
        if "==" in line and not line.startswith("#")
    )
    pins = {name.lower().replace("_", "-"): version for name, version in pins.items()}
    requirements = project["dependencies"] + project["optional-dependencies"]["dev"]
    for requirement in requirements:
        name, version = requirement.split("==")
        name = re.sub(r"\[.*\]", "", name).lower().replace("_", "-")
        assert pins[name] == version, requirement
    assert "tensorboard==2.21.0" in project["dependencies"]
    for package in ("tensorboard-data-server", "grpcio", "werkzeug", "markdown", "markupsafe"):
        assert package in pins
