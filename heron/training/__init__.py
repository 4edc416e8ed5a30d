"""The driver, sources of experience, evaluation, checkpoints and logs (``heron.api`` builds
runs from a RunConfig)."""

from heron.run_config import RunConfig
from heron.training.driver import Setup, TrainingError, continue_run, make_setup, train

__all__ = ["RunConfig", "Setup", "TrainingError", "continue_run", "make_setup", "train"]
