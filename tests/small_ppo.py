"""The small PPO run that the driver's tests share (checkpoints, resume, the save rule,
stopping, schedules, controllers, run safety, robustness, the command line), in Python and
as command-line flags.

One configuration, so that its programs are traced once and compiled once in a test run,
whichever test gets there first: builds here pass heron's program store (which `heron
train` uses by itself), and the run's compilation cache holds the executables. What the
tests vary is what the compiled program never sees (steps, seeds, schedules of evaluation
and checkpoints, the run directory); a test that needs another program says why.

gymnax CartPole, 4 environments x 16 steps = 64 steps an iteration, 2 epochs of 2
mini-batches of 32 sequences; greedy evaluation over 2 episodes.
"""

from __future__ import annotations

import conftest

from heron.agents import PPOConfig
from heron.training import RunConfig

PPO = PPOConfig(unroll_length=16, batch_size=32, num_epochs=2)
STEPS_PER_ITERATION = 64

# The run's fields the program depends on, and the host-side ones most tests use.
PROGRAM = dict(num_envs=4, n_evals=2, eval_temperatures=(0.0,))
HOST = dict(steps=1024, eval_every_n=4, save_every_n=4, done_frac_for_policy_save=0.0)

# The same run from the command line (the gymnax CartPole preset changes nothing else).
FLAGS = [
    "--num-envs", "4", "--n-evals", "2", "--eval-temperatures", "0",
    "--ppo.unroll-length", "16", "--ppo.batch-size", "32", "--ppo.num-epochs", "2",
]  # fmt: skip


def run(**overrides) -> RunConfig:
    """The shared run with ``overrides`` (host-side ones keep its programs)."""
    return RunConfig(**{**PROGRAM, **HOST, **overrides})


def build(algo: str = "ppo", config=PPO, run_config: RunConfig | None = None, controller=None):
    """``heron.api.build`` of the shared run (or ``run_config``) with the test run's program
    store."""
    return conftest.build(algo, config, run() if run_config is None else run_config, controller)


resume = conftest.resume
