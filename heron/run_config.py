"""The run configuration: what every algorithm's training run shares (``heron.api`` reads it
to choose the source of experience; the driver, for its schedules). The options of a source
other than the run's own environments (``dataset``, ``actors``) are checked by that source
(``heron.sources``)."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Literal

from heron import sources
from heron.configs import ConfigError, choice, integer, number, validate
from heron.envs.families.ale import AtariConfig
from heron.replay import REPLAYERS

SYNC, ASYNC = "sync", "async"


@dataclasses.dataclass(frozen=True)
class DistConfig:
    """How a run with ``--actors`` drives its Ray actors (ALF's synchronous and asynchronous
    off-policy drivers); see heron/distributed/."""

    driver: Literal["sync", "async"] = choice(SYNC, (SYNC, ASYNC))
    """sync: every iteration takes one unroll from every actor, joined in actor order
    (deterministic); async: actors run freely and the learner trains on learn_queue_cap
    unrolls at a time, through the cycle_one_time replay."""
    policy_lag: int = integer(0, 0, 1)
    """sync only: 1 lets the actors collect the next unroll with the previous parameters
    while the learner updates (exactly one version behind, still deterministic)."""
    learn_queue_cap: int = integer(1, 1)
    """async only: unrolls (from as many actors) the learner takes per iteration; <= actors."""
    max_policy_lag: int | None = integer(None, 0, optional=True)
    """async only: drop (and count) unrolls made more than this many versions ago."""
    unroll_timeout_s: float = number(600.0, 0.0, low_open=True)
    """An actor silent this long on one unroll is restarted like one that died."""
    max_actor_restarts: int = integer(3, 0)
    """Restarts allowed per actor; one more failure stops the run (its last checkpoint
    is kept)."""
    learner_gpus: int = integer(0, 0)
    """> 0: the learner runs in its own Ray actor with this many GPUs (data-parallel over
    them); the actors stay on CPU."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Environment, budget, evaluation and checkpoint settings of one training run."""

    env: str = "gymnax:CartPole-v1"
    """Environment id with its source: gymnax:<id>, gym:<id> or heron:<id>. From Python also
    an environment object (a gymnasium.Env, a gymnax Environment or (env, params) pair),
    which runs as heron:<its class name> (``heron.envs.id_of``)."""
    steps: int = integer(100_000, 1)
    """Environment steps to train for (with a dataset: gradient updates), rounded up to whole
    iterations."""
    seed: int = integer(0, 0)
    """Random seed; the same seed gives the same parameters on CPU."""
    seeds: int = integer(1, 1)
    """Independent runs (seeds seed, seed+1, ...) vmapped into one program (JAX envs)."""
    num_envs: int = integer(32, 1)
    """Environments stepped in parallel."""
    replay: Literal["one_time", "uniform", "cycle_one_time"] | None = choice(
        None, (None, *REPLAYERS)
    )
    """Experience replayer: one_time, uniform or cycle_one_time; default the agent's own
    (ppo: one_time; crr, svg0: uniform)."""
    run_dir: str | None = None
    """Where to write the run; default runs/<algo>_<env>_<time>."""
    eval_every_n: int = integer(5, 1)
    """Evaluate every n iterations (and at the end)."""
    n_evals: int = integer(8, 1)
    """Evaluation episodes per temperature."""
    eval_temperatures: tuple[float, ...] = (1.0, 0.5, 0.0)
    """Sampling temperatures to evaluate at; 0 is greedy."""
    separate_eval: bool = True
    """Evaluate on a separate env; False reports training episodes as temperature 1.0."""
    stop_at_return: float | None = number(None, optional=True)
    """End the run at the first evaluation whose greedy return reaches this on every seed
    (SB3's StopTrainingOnRewardThreshold), with a checkpoint there; default run all steps."""
    max_timestep: int | None = integer(None, 1, optional=True)
    """Training episode time limit (truncation); default the env's own."""
    len_history_for_policy: int = integer(1, 1)
    """Observations stacked for the policy: the last k, reset at episode starts."""
    normalize_observations: bool = False
    """Normalise observations by running mean and std (kept in checkpoints)."""
    reward_scale: float = number(1.0, 0.0, low_open=True)
    """Factor on the rewards the learner sees (returns are reported unscaled)."""
    clip_rewards: bool = False
    """The learner sees each reward's sign (-1, 0 or 1; SB3's ClipRewardEnv, the Atari
    presets'); returns are reported unclipped."""
    normalize_rewards: bool = False
    """Divide the rewards the learner sees by the running standard deviation of the
    discounted return (at the agent's discount), clipped to +-10: SB3's
    VecNormalize(norm_reward=True). Its statistics come from training steps and are kept in
    checkpoints; returns are reported unnormalised."""
    max_timestep_eval: int | None = integer(None, 1, optional=True)
    """Evaluation episode time limit; default the env's own."""
    save_every_n: int = integer(100, 1)
    """Checkpoint every n iterations, once enough episodes ended; always at the end."""
    done_frac_for_policy_save: float = number(0.5, 0.0)
    """Fraction of num_envs x seeds episodes that must be done between two scheduled saves
    (Trax's rule): ended by the environment, in a terminal state or at its own time limit
    (which old gym reported as done), not cut by ``max_timestep`` (Trax's truncation)."""
    keep_checkpoints: int = integer(3, 1)
    """How many of the latest checkpoints to keep."""
    checkpoints: bool = True
    """Save checkpoints (Trax's should_save_checkpoints); --no-checkpoints saves none, and
    such a run cannot be resumed."""
    summaries: bool = True
    """Write metrics.jsonl and TensorBoard summaries (Trax's should_write_summaries);
    --no-summaries writes neither (the final JSON line is printed all the same)."""
    wandb: bool = False
    """Also log to Weights & Biases: the scalars TensorBoard gets and the run's config
    (needs heron[wandb]); with --no-summaries, to Weights & Biases only. With
    WANDB_MODE=offline it is kept under the run directory (wandb/), no network needed;
    ``wandb sync`` uploads it later."""
    wandb_project: str = "heron"
    """With wandb: the Weights & Biases project the run logs to."""
    video_every_n: int | None = integer(None, 1, optional=True)
    """Every n-th evaluation, also record one greedy episode of the first seed's policy in
    the environment's Gymnasium twin (gym:<id>, or gymnax:<id> with one): a GIF in
    videos/step_<steps>.gif, shown by TensorBoard (Images, tag eval/video) and logged to
    Weights & Biases with --wandb."""
    controller: str | None = None
    """Change hyperparameters as the run goes (Trax's controller), e.g.
    ``plateau(learning_rate, 0.5, 3)``: halve the learning rate whenever the greedy
    evaluation has not improved for 3 evaluations (see heron/training/controllers.py)."""
    init_from: str | None = None
    """Start from another run's parameters (its latest checkpoint): every parameter whose
    path and shape match is copied, the rest initialised afresh."""
    dataset: str | None = None
    """Train offline from this Minari dataset directory; the env only evaluates (on the
    command line, without --env: the env the dataset records it was collected in)."""
    updates_per_iteration: int | None = integer(None, 1, optional=True)
    """With a dataset: gradient updates per iteration, the unit of the eval and save
    schedules (default 1000); refused without one."""
    preset: str = "auto"
    """Tuned settings to start from (heron/presets/<algo>.toml): auto (the preset for --env
    when there is one), none (the bare defaults) or an environment key of the agent's preset
    file; options given override it. config.json records the one used (algo/key or none)."""
    env_module: str | None = None
    """Python module imported before the environment is made (e.g. mypkg.envs): its
    gymnasium.register / heron.envs.register calls make its ids available."""
    actors: int = integer(0, 0)
    """Ray actor processes collecting experience, each stepping num_envs / actors
    environments (0: collect in this process). Needs heron[ray]."""
    ray_address: str | None = None
    """With actors: the Ray cluster to attach to (host:port of its head, or auto); default
    a local Ray instance on 127.0.0.1 that the run starts and stops."""
    dist: DistConfig = dataclasses.field(default_factory=DistConfig)
    """With actors: the driver of the actors (--dist.driver, --dist.policy-lag, ...)."""
    atari: AtariConfig = dataclasses.field(default_factory=AtariConfig)
    """Options of ale: environments (--atari.noop-max, --atari.episodic-life, ...)."""

    def __post_init__(self):
        if not isinstance(self.env, str):  # an environment object, from Python
            from heron import envs

            object.__setattr__(self, "env", envs.id_of(self.env))
        validate(self, "")
        if not (
            len(self.eval_temperatures) > 0
            and all(t >= 0 and t != float("inf") for t in self.eval_temperatures)
        ):
            raise ConfigError(
                "eval_temperatures must be one or more finite values >= 0, got "
                f"{self.eval_temperatures}"
            )
        if self.run_dir is not None and not self.run_dir:
            raise ConfigError("run_dir must be a directory path, got an empty string")
        if self.atari != AtariConfig() and not self.env.startswith("ale:"):
            raise ConfigError(
                f"atari.* options set up ale: environments; {self.env!r} is not one: remove them"
            )
        if self.clip_rewards and self.normalize_rewards:
            raise ConfigError(
                "clip_rewards and normalize_rewards both rescale the rewards the learner sees: "
                "use one of them"
            )
        if self.normalize_rewards and self.reward_scale != 1.0:
            raise ConfigError(
                f"reward_scale={self.reward_scale:g} would be undone by normalize_rewards, "
                "which divides the rewards by their returns' standard deviation: use one of them"
            )
        if self.wandb_project != "heron" and not self.wandb:
            raise ConfigError(
                f"wandb_project={self.wandb_project!r} names the Weights & Biases project of "
                "--wandb, which is off: add --wandb or remove it"
            )
        if self.video_every_n is not None:
            from heron.video import render_id

            render_id(self.env)  # a VideoError where the environment cannot render
            if not (self.summaries or self.wandb):
                raise ConfigError(
                    "video_every_n records videos for TensorBoard and Weights & Biases; with "
                    "--no-summaries and without --wandb nothing would show them: remove it"
                )
        if self.wandb and importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                "wandb logging needs the wandb package: pip install 'heron[wandb]' "
                "(make install includes it)"
            )
        sources.check(self)
