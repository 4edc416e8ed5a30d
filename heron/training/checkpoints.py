"""Checkpoints with orbax: atomic (written to a temporary folder, then renamed), last k kept."""

from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
    """A missing or unreadable checkpoint."""


def _manager(run_dir: str, keep: int = 3) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=False
    )
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(run_dir, "checkpoints")), options=options
    )


class Checkpointer:
    def __init__(self, run_dir: str, keep: int = 3):
        self._manager = _manager(run_dir, keep)

    def save(self, step: int, state) -> None:
        self._manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self._manager.wait_until_finished()

    def close(self):
        self._manager.close()


def latest_step(run_dir: str) -> int | None:
    folder = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(folder):
        return None
    manager = _manager(run_dir)
    try:
        return manager.latest_step()
    finally:
        manager.close()


def restore(run_dir: str, template, step: int | None = None):
    """Restores the checkpoint at ``step`` (default: the latest) into ``template``'s structure."""
    step = latest_step(run_dir) if step is None else step
    if step is None:
        raise CheckpointError(f"no checkpoint in {os.path.join(run_dir, 'checkpoints')!r}")
    manager = _manager(run_dir)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
    try:
        return manager.restore(step, args=ocp.args.StandardRestore(abstract)), step
    except Exception as error:  # orbax raises many types for unreadable data
        detail = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        if "shape" in str(error) or "structure" in str(error).lower():
            raise CheckpointError(
                f"checkpoint {step} in {run_dir!r} does not match its config.json ({detail}); "
                "shape-determining fields (num_envs, seeds, unroll_length, hidden_sizes, "
                "two_towers, ...) must stay as they were when it was written"
            ) from error
        raise CheckpointError(
            f"checkpoint {step} in {run_dir!r} cannot be read ({detail})"
        ) from error
    finally:
        manager.close()
