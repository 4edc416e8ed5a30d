"""The run configuration: what every algorithm's training run shares."""

from __future__ import annotations

import dataclasses

from heron.agents.base import check


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Environment, budget, evaluation and checkpoint settings of one training run."""

    env: str = "gymnax:CartPole-v1"
    """Environment id with its source: gymnax:<id>, gym:<id> or heron:<id>."""
    steps: int = 100_000
    """Environment steps to train for (with a dataset: gradient updates), rounded up to whole
    iterations."""
    seed: int = 0
    """Random seed; the same seed gives the same parameters on CPU."""
    seeds: int = 1
    """Independent runs (seeds seed, seed+1, ...) vmapped into one program (JAX envs)."""
    num_envs: int = 32
    """Environments stepped in parallel."""
    run_dir: str | None = None
    """Where to write the run; default runs/<algo>_<env>_<time>."""
    eval_every_n: int = 5
    """Evaluate every n iterations (and at the end)."""
    n_evals: int = 8
    """Evaluation episodes per temperature."""
    eval_temperatures: tuple[float, ...] = (1.0, 0.5, 0.0)
    """Sampling temperatures to evaluate at; 0 is greedy."""
    separate_eval: bool = True
    """Evaluate on a separate env; False reports training episodes as temperature 1.0."""
    max_timestep: int | None = None
    """Training episode time limit (truncation); default the env's own."""
    len_history_for_policy: int = 1
    """Observations stacked for the policy: the last k, reset at episode starts."""
    normalize_observations: bool = False
    """Normalise observations by running mean and std (kept in checkpoints)."""
    reward_scale: float = 1.0
    """Factor on the rewards the learner sees (returns are reported unscaled)."""
    max_timestep_eval: int | None = None
    """Evaluation episode time limit; default the env's own."""
    save_every_n: int = 100
    """Checkpoint every n iterations, once enough episodes ended; always at the end."""
    done_frac_for_policy_save: float = 0.5
    """Fraction of num_envs x seeds episodes that must end between two saves (Trax's rule)."""
    keep_checkpoints: int = 3
    """How many of the latest checkpoints to keep."""
    dataset: str | None = None
    """Train offline from this Minari dataset directory; the env only evaluates."""
    updates_per_iteration: int = 1_000
    """With a dataset: gradient updates per iteration (the unit of the eval/save schedules)."""
    env_module: str | None = None
    """Python module imported before the environment is made (e.g. mypkg.envs): its
    gymnasium.register / heron.envs.register calls make its ids available."""

    def __post_init__(self):
        check(self.steps > 0, f"steps must be > 0, got {self.steps}")
        check(self.num_envs > 0, f"num_envs must be > 0, got {self.num_envs}")
        check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        check(self.seeds >= 1, f"seeds must be >= 1, got {self.seeds}")
        check(
            self.len_history_for_policy >= 1,
            f"len_history_for_policy must be >= 1, got {self.len_history_for_policy}",
        )
        check(self.reward_scale > 0, f"reward_scale must be > 0, got {self.reward_scale}")
        check(
            self.done_frac_for_policy_save >= 0,
            f"done_frac_for_policy_save must be >= 0, got {self.done_frac_for_policy_save}",
        )
        check(self.eval_every_n > 0, f"eval_every_n must be > 0, got {self.eval_every_n}")
        check(self.n_evals > 0, f"n_evals must be > 0, got {self.n_evals}")
        check(
            len(self.eval_temperatures) > 0 and all(t >= 0 for t in self.eval_temperatures),
            f"eval_temperatures must be one or more values >= 0, got {self.eval_temperatures}",
        )
        check(self.save_every_n > 0, f"save_every_n must be > 0, got {self.save_every_n}")
        check(
            self.keep_checkpoints > 0, f"keep_checkpoints must be > 0, got {self.keep_checkpoints}"
        )
        check(
            self.updates_per_iteration > 0,
            f"updates_per_iteration must be > 0, got {self.updates_per_iteration}",
        )
        check(
            self.dataset is None or bool(self.dataset),
            "dataset must be a directory path, got an empty string",
        )
        for name in ("max_timestep", "max_timestep_eval"):
            value = getattr(self, name)
            check(value is None or value > 0, f"{name} must be > 0, got {value}")
