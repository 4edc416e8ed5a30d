"""Checkpoints with orbax: atomic (written to a temporary folder, then renamed), last k kept.

Each checkpoint folder also holds ``heron_sha256.json``, the SHA-256 of every file orbax
wrote, so a damaged checkpoint (truncated or altered files, a partial copy) is recognised
before orbax reads it. ``restore`` without a step falls back from an unreadable latest
checkpoint to the newest readable one and prints a warning line naming the step it skipped
and why; every failure is one CheckpointError line, never orbax's tracebacks or logs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

import jax

from heron.configs import ConfigError
from heron.training import rundir

if TYPE_CHECKING:
    import orbax.checkpoint

DIGEST_FILE = "heron_sha256.json"
CONFIG_FILE = "heron_config.json"  # the run's config.json as it was when the step was saved
LATEST = "checkpoints"  # the last few checkpoints
BEST = "best"  # the checkpoint of the best greedy evaluation
ITEM = "default"  # orbax's folder for the one item of a checkpoint
UNREADABLE_DIR = "checkpoints_unreadable"  # beside checkpoints/, outside orbax's folder
SUPERSEDED_BEST_DIR = "best_superseded"  # a best checkpoint of a step redone on resume


class CheckpointError(ValueError):
    """A missing or unreadable checkpoint, or one that does not fit the run's config."""


class _Unreadable(Exception):
    """One checkpoint cannot be read (internal: restore skips it)."""


@contextlib.contextmanager
def _quiet_orbax():
    """Silences orbax's absl log lines (warnings and errors about metadata files) while heron
    reports problems itself, and tensorstore's "Event loop is closed" reports."""
    _drop_closed_loop_reports()
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _orbax():
    """orbax.checkpoint, imported at the first save or restore: processes that never save
    (Ray's actors) skip its 0.4 s."""
    import orbax.checkpoint

    return orbax.checkpoint


def _folder(run_dir: str, kind: str = LATEST) -> str:
    return os.path.abspath(os.path.join(run_dir, kind))


def _manager(
    run_dir: str, keep: int = 3, writer: bool = False, kind: str = LATEST
) -> orbax.checkpoint.CheckpointManager:
    """orbax's manager of ``run_dir/checkpoints``; a ``writer`` also removes the temporary
    folders of saves that never finished (a killed process, a full disk)."""
    ocp = _orbax()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        create=True,
        enable_async_checkpointing=False,
        cleanup_tmp_directories=writer,
    )
    return ocp.CheckpointManager(
        _folder(run_dir, kind), options=options, item_handlers=ocp.StandardCheckpointHandler()
    )


def _file_digests(step_dir: str) -> dict[str, str]:
    """SHA-256 of every file under ``step_dir`` but the digest file, by relative path."""
    digests = {}
    for root, _, files in os.walk(step_dir):
        for name in files:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, step_dir)
            if relative == DIGEST_FILE:
                continue
            sha = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    sha.update(block)
            digests[relative] = sha.hexdigest()
    return digests


def _write_digest(step_dir: str) -> None:
    digests = _file_digests(step_dir)
    temporary = os.path.join(step_dir, DIGEST_FILE + ".tmp")
    with open(temporary, "w") as f:
        json.dump(digests, f, indent=0, sort_keys=True)
    os.replace(temporary, os.path.join(step_dir, DIGEST_FILE))


def verify(run_dir: str, step: int, kind: str = LATEST) -> str | None:
    """Why checkpoint ``step`` is damaged (no item folder, a missing, extra or altered file),
    or None when its files are those recorded at save time (or it predates digests: then
    orbax decides)."""
    step_dir = os.path.join(_folder(run_dir, kind), str(step))
    if not os.path.isfile(os.path.join(step_dir, ITEM, "_METADATA")):
        return f"its folder has no {ITEM}/_METADATA (an incomplete write or copy)"
    path = os.path.join(step_dir, DIGEST_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            recorded = json.load(f)
    except (OSError, ValueError) as error:
        return f"its {DIGEST_FILE} is unreadable ({error})"
    found = _file_digests(step_dir)
    for name in sorted(recorded):
        if name not in found:
            return f"the file {name!r} is missing"
        if found[name] != recorded[name]:
            return f"the file {name!r} changed since it was written"
    for name in sorted(found):
        if name not in recorded:
            return f"it holds an unexpected file {name!r}"
    return None


class Checkpointer:
    """Saves a run's state every so often; keeps the last ``keep`` checkpoints."""

    def __init__(self, run_dir: str, keep: int = 3, kind: str = LATEST):
        self._run_dir, self._kind = run_dir, kind
        with _quiet_orbax():
            self._manager = _manager(run_dir, keep, writer=True, kind=kind)

    def save(self, step: int, state, record: dict | None = None) -> None:
        """Saves ``state`` as checkpoint ``step``, with the run's config ``record`` beside it.
        A folder already there for ``step`` is moved aside first: to
        ``checkpoints_unreadable/`` for the latest checkpoints (one ``restore`` skipped as
        unreadable), to ``best_superseded/`` for the best evaluation's (its step redone after
        a resume from an earlier checkpoint)."""
        with _quiet_orbax():
            if step in self._manager.all_steps():
                self._set_aside(step)
                self._manager.reload()
            try:
                self._manager.save(
                    step, args=_orbax().args.StandardSave(_without_empty(state)), force=True
                )
                self._manager.wait_until_finished()
            except Exception as error:  # tensorstore reports OS errors as ValueError
                self._remove_partial(step)
                raise _write_error(error, _folder(self._run_dir, self._kind), step) from error
        step_dir = os.path.join(_folder(self._run_dir, self._kind), str(step))
        if record is not None:
            with open(os.path.join(step_dir, CONFIG_FILE), "w") as f:
                json.dump(record, f, indent=1)
        _write_digest(step_dir)

    def _remove_partial(self, step: int) -> None:
        """Removes orbax's temporary folder of a failed save (it may hold most of a disk)."""
        folder = _folder(self._run_dir, self._kind)
        for name in os.listdir(folder):
            if name.startswith(f"{step}.orbax-checkpoint-tmp"):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)

    def _set_aside(self, step: int) -> None:
        folder = UNREADABLE_DIR if self._kind == LATEST else SUPERSEDED_BEST_DIR
        aside = os.path.join(self._run_dir, folder)
        os.makedirs(aside, exist_ok=True)
        name, count = str(step), 1
        while os.path.exists(os.path.join(aside, name)):
            count += 1
            name = f"{step}.{count}"
        source = os.path.join(_folder(self._run_dir, self._kind), str(step))
        shutil.move(source, os.path.join(aside, name))

    def close(self):
        self._manager.close()


_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")


def _write_error(error: Exception, folder: str, step: int) -> Exception:
    """An OSError (errno, reason, the checkpoints folder) for a save that failed on an OS
    error (tensorstore raises them as ValueError with ``os_error_code=N``); else ``error``."""
    code = error.errno if isinstance(error, OSError) else None
    found = _OS_ERROR_CODE.search(str(error))
    code = code if code is not None else (int(found[1]) if found else None)
    if code is None:
        return error
    reason = f"{os.strerror(code)}; checkpoint {step} was not written (older ones are intact)"
    return OSError(code, reason, folder)


def all_steps(run_dir: str, kind: str = LATEST) -> list[int]:
    """The checkpoint steps of ``run_dir``, ascending (readable or not)."""
    if not os.path.isdir(_folder(run_dir, kind)):
        return []
    with _quiet_orbax():
        manager = _manager(run_dir, kind=kind)
        try:
            return sorted(manager.all_steps())
        finally:
            manager.close()


def latest_step(run_dir: str, kind: str = LATEST) -> int | None:
    """The newest checkpoint step of ``run_dir`` (readable or not), or None."""
    steps = all_steps(run_dir, kind)
    return steps[-1] if steps else None


def _without_empty(tree):
    """``tree`` with None for its arrays of no elements (orbax refuses to save those; a
    physics state holds some, e.g. MJX's actuator activations of a model without any)."""
    return jax.tree.map(lambda leaf: None if getattr(leaf, "size", 1) == 0 else leaf, tree)


def _with_empty(restored, template):
    """``restored`` (from ``_without_empty``) with ``template``'s empty arrays back."""

    def refill(leaf, like):
        if leaf is None and like is not None:
            return jax.numpy.zeros(like.shape, like.dtype)
        return leaf

    return jax.tree.map(refill, restored, template, is_leaf=lambda leaf: leaf is None)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def _leaves_by_path(tree) -> dict[tuple[str, ...], object]:
    """Leaves keyed by their path as names (orbax records NamedTuple fields and tuples as
    dict keys and list indices; the names are the same)."""

    def name(entry) -> str:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                return str(getattr(entry, attribute))
        return str(entry)

    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {tuple(name(entry) for entry in path): leaf for path, leaf in flat}


def _mismatch(manager, step: int, abstract) -> str | None:
    """How the arrays recorded in checkpoint ``step`` differ from ``abstract`` (the first
    difference), or None when they fit. _Unreadable when its metadata cannot be read."""
    try:
        recorded = manager.item_metadata(step)
        recorded = _leaves_by_path(getattr(recorded, "tree", recorded))
    except Exception as error:  # orbax raises many types for damaged metadata
        raise _Unreadable(f"its metadata cannot be read ({_one_line(error)})") from error
    if not recorded:
        raise _Unreadable("it has no metadata")
    wanted = _leaves_by_path(abstract)
    for path, leaf in wanted.items():
        where = "/".join(path)
        if path not in recorded:
            return f"it has no array {where}"
        shape = tuple(getattr(recorded[path], "shape", None) or ())
        if shape != tuple(leaf.shape):
            return f"its array {where} has shape {shape}, the config gives {tuple(leaf.shape)}"
    extra = sorted(set(recorded) - set(wanted))
    if extra:
        return f"it has an array {'/'.join(extra[0])} the config does not give"
    return None


def _restore_one(manager, run_dir: str, step: int, abstract, kind: str = LATEST):
    damage = verify(run_dir, step, kind)
    if damage is not None:
        raise _Unreadable(damage)
    mismatch = _mismatch(manager, step, abstract)
    if mismatch is not None:
        raise CheckpointError(
            f"checkpoint {step} in {run_dir!r} does not match its config.json ({mismatch}); "
            "shape-determining fields (num_envs, seeds, unroll_length, hidden_sizes, "
            "two_towers, ...) must stay as they were when it was written"
        )
    try:
        return manager.restore(step, args=_orbax().args.StandardRestore(abstract))
    except Exception as error:  # orbax raises many types for unreadable data
        raise _Unreadable(f"it cannot be read ({_one_line(error)})") from error


def _drop_closed_loop_reports() -> None:
    """After a failed read or write, tensorstore threads still finishing their work each
    report "Event loop is closed" as an unraisable exception (a traceback each, even after
    heron's error line). Drops those reports; every other one goes to the previous hook."""
    previous = sys.unraisablehook
    if getattr(previous, "heron_drops_closed_loop", False):
        return

    def hook(unraisable):
        error = unraisable.exc_value
        if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
            return
        previous(unraisable)

    hook.heron_drops_closed_loop = True
    sys.unraisablehook = hook


def _warn(message: str) -> None:
    print(f"heron: warning: {message}", file=sys.stderr, flush=True)


def check_unchanged_config(
    run_dir: str, step: int, record: dict, resumable: tuple[str, ...]
) -> None:
    """The config ``record`` of a resumed run may differ from the one saved with checkpoint
    ``step`` only in the fields named by ``resumable`` (prefixes of dotted names)."""
    recorded = recorded_config(run_dir, step)
    if recorded is None:
        return
    current = json.loads(json.dumps(record))  # tuples as JSON lists, like the record
    changes = [
        change
        for change in rundir.changed_fields(recorded, current)
        if not change.startswith(resumable)
    ]
    if changes:
        raise ConfigError(
            f"the config of {run_dir!r} differs from the one recorded with checkpoint {step} "
            f"({'; '.join(changes)}); --resume continues a run as it was (only --steps may "
            "change): restore config.json or start a new run"
        )


def recorded_config(run_dir: str, step: int, kind: str = LATEST) -> dict | None:
    """The config record saved with checkpoint ``step`` (None for checkpoints without one)."""
    path = os.path.join(_folder(run_dir, kind), str(step), CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def restore(run_dir: str, template, step: int | None = None, kind: str = LATEST):
    """(state, step): checkpoint ``step`` of ``run_dir`` restored into ``template``'s
    structure. Without ``step``: the newest readable checkpoint; each newer one skipped as
    unreadable gets a warning line on stderr. CheckpointError (one line) when there is no
    checkpoint, none is readable, ``step`` is unreadable, or a checkpoint does not fit the
    template (the run's config changed shape)."""
    steps = all_steps(run_dir, kind)
    folder = _folder(run_dir, kind)
    if not steps:
        raise CheckpointError(f"no checkpoint in {folder!r}")
    if step is not None and step not in steps:
        raise CheckpointError(
            f"no checkpoint {step} in {folder!r}; it holds {', '.join(map(str, steps))}"
        )
    candidates = [step] if step is not None else sorted(steps, reverse=True)
    abstract = _without_empty(jax.tree.map(_orbax().utils.to_shape_dtype_struct, template))
    skipped: list[tuple[int, str]] = []
    with _quiet_orbax():
        manager = _manager(run_dir, kind=kind)
        try:
            for candidate in candidates:
                try:
                    state = _restore_one(manager, run_dir, candidate, abstract, kind)
                except _Unreadable as problem:
                    skipped.append((candidate, str(problem)))
                    continue
                for bad, why in skipped:
                    _warn(
                        f"checkpoint {bad} in {run_dir!r} is unreadable ({why}); "
                        f"restored checkpoint {candidate} instead"
                    )
                return _with_empty(state, template), candidate
        finally:
            manager.close()
    if step is not None:
        raise CheckpointError(f"checkpoint {step} in {run_dir!r} is unreadable: {skipped[0][1]}")
    reasons = "; ".join(f"{bad}: {why}" for bad, why in skipped)
    raise CheckpointError(f"no readable checkpoint in {folder!r} ({reasons})")
