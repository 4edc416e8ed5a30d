"""The driver, evaluation, checkpoints and logs."""

from heron.training.config import RunConfig
from heron.training.driver import Setup, TrainingError, build, params_digest, resume, train

__all__ = ["RunConfig", "Setup", "TrainingError", "build", "params_digest", "resume", "train"]
