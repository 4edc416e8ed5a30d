"""The run directory on disk: config.json, metrics.jsonl and the digests of parameters.

RUN_DIR/config.json      everything needed to rerun or resume (``write_config``)
RUN_DIR/metrics.jsonl    one JSON object a line (written by ``logging.RunLogger``)
RUN_DIR/checkpoints/     orbax (``checkpoints``)
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import socket

import jax
import numpy as np

from heron import configs

CONFIG = "config.json"
METRICS = "metrics.jsonl"


class RunDirError(ValueError):
    """A run directory that is missing, empty or unreadable."""


def default_run_dir(algo: str, env_id: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{algo}_{env_id.replace(':', '-')}_{stamp}")


def params_digest(params) -> str:
    """sha256 of the parameters' bytes in tree order: equal digests, bit-equal parameters."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(params)):
        leaf = np.ascontiguousarray(leaf)
        digest.update(str((leaf.shape, leaf.dtype.str)).encode())
        digest.update(leaf.tobytes())
    return digest.hexdigest()


def write_config(run_dir: str, record: dict) -> None:
    """Writes config.json atomically (a temporary file, then a rename)."""
    path = os.path.join(run_dir, CONFIG)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=2)
    os.replace(path + ".tmp", path)


def read_config(run_dir: str) -> dict:
    """The raw record of config.json."""
    path = os.path.join(run_dir, CONFIG)
    if not os.path.isdir(run_dir):
        raise RunDirError(f"run dir {run_dir!r} does not exist")
    if not os.path.isfile(path):
        raise RunDirError(f"run dir {run_dir!r} has no {CONFIG}: not a heron run")
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunDirError(f"{path!r} is unreadable: {error}") from error


def config_from_record(config_type, values: dict, where: str, renamed: dict | None = None):
    """A config dataclass from a record's JSON values; unknown fields refused (``renamed``
    maps an old field to the one that replaced it)."""
    if not isinstance(values, dict):
        raise RunDirError(f"{where}: expected an object of {config_type.__name__} fields")
    unknown = configs.unknown_fields(config_type, values)
    if unknown:
        name = unknown[0]
        hint = f" (now {renamed[name]})" if renamed and name in renamed else ""
        raise RunDirError(f"unknown field {name!r}{hint} for {config_type.__name__} in {where}")
    return configs.from_values(config_type, values)


def truncate_metrics(run_dir: str, step: int) -> list[dict]:
    """Drops the lines written after the checkpoint at ``step`` (they will be written
    again); returns the lines kept."""
    path = os.path.join(run_dir, METRICS)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    kept = [r for r in records if r.get("step", 0) <= step]
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in kept)
    os.replace(path + ".tmp", path)
    return kept


def restart_from_scratch(run_dir: str) -> None:
    """For a run with no checkpoint to resume from: empties its ``metrics.jsonl`` to start
    again from step 0, when that file records no training. A history of training without any
    checkpoint means the checkpoints were lost (or removed): RunDirError, nothing changed."""
    path = os.path.join(run_dir, METRICS)
    records = []
    if os.path.exists(path):
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    trained = [r.get("step", 0) for r in records if r.get("kind") in ("train", "eval")]
    if trained:
        raise RunDirError(
            f"{run_dir!r} has no checkpoint, yet its {METRICS} records training up to step "
            f"{max(trained)} ({len(records)} lines): its checkpoints/ was removed or lost. "
            "Resuming would train again from step 0 and overwrite that history, so nothing "
            f"was changed; start a new run directory, or move {METRICS} out of this one to "
            "start it again"
        )
    truncate_metrics(run_dir, -1)


def greedy_history(records: list[dict], temperature: float, seeds: list[int]) -> list[np.ndarray]:
    """The greedy evaluations recorded so far, one array [K] (per seed) per evaluation."""
    by_step: dict[int, dict[int, float]] = {}
    for r in records:
        if r.get("kind") == "eval" and r.get("temperature") == temperature:
            value = r["return_mean"]
            by_step.setdefault(r["step"], {})[r["seed"]] = math.nan if value is None else value
    return [np.array([by_step[s].get(seed, math.nan) for seed in seeds]) for s in sorted(by_step)]


LOCK = ".lock"


class RunDirInUse(RunDirError):
    """Another live process is writing the run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


class RunLock:
    """``RUN_DIR/.lock`` held by the process writing the run (its pid and host); a second
    writer is refused with one line. A lock left by a process that no longer runs (killed
    with SIGKILL, a crashed machine) is stale and taken over."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, LOCK)
        self.held = False

    def acquire(self) -> RunLock:
        owner = {"pid": os.getpid(), "host": socket.gethostname()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._refuse_unless_stale()
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(owner, f)
            self.held = True
            return self
        raise RunDirInUse(
            f"could not lock {os.path.dirname(self.path)!r}: {self.path!r} keeps reappearing"
        )

    def _refuse_unless_stale(self) -> None:
        try:
            with open(self.path) as f:
                owner = json.load(f)
            pid, host = int(owner["pid"]), owner.get("host")
        except (OSError, ValueError, KeyError, TypeError):
            pid, host = None, None  # a half-written lock: its writer died before finishing
        here = host in (None, socket.gethostname())
        if pid is not None and (not here or (pid != os.getpid() and _alive(pid))):
            where = "" if here else f" on {host}"
            raise RunDirInUse(
                f"run dir {os.path.dirname(self.path)!r} is in use by process {pid}{where}; "
                f"wait for it to finish or stop it (a stale lock, {self.path!r}, is taken over "
                "automatically once its process has gone)"
            )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def release(self) -> None:
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def changed_fields(recorded: dict, current: dict, prefix: str = "") -> list[str]:
    """The dotted names whose values differ between two config records (``a.b: 1 -> 2``)."""
    changes = []
    for name in sorted(set(recorded) | set(current)):
        old, new = recorded.get(name, "<absent>"), current.get(name, "<absent>")
        path = f"{prefix}{name}"
        if isinstance(old, dict) and isinstance(new, dict):
            changes.extend(changed_fields(old, new, path + "."))
        elif old != new:
            changes.append(f"{path}: {old!r} -> {new!r}")
    return changes
