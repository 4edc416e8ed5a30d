"""A dataset as a source of experience: offline training through the same driver.

The dataset's episodes go through the run's observation pipeline once (reward scaling,
history stacking; the dataset's own mean and variance are the normalisation statistics,
frozen, for sampled steps and evaluation alike) and enter the agent's replay once, at the
start, in one lane whose capacity is the dataset's size; nothing is collected afterwards.
Each iteration is ``updates_per_iteration`` learning steps sampled from that replay (no
warm-up, no replay ratio), and counts as that many steps towards ``--steps``. A model
without a policy (``Agent.scoring``) has a seeded share of the episodes held out of the
replay, on which it is scored; their observations are normalised by the training
episodes' statistics.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron import sources
from heron.agents.base import Agent
from heron.configs import ConfigError
from heron.envs.wrappers import ObservationPipeline, PipelineState, RunningStats
from heron.offline.dataset import Dataset, check_against_env, content_hash, read_dataset, to_steps
from heron.training.sources import EpisodeStats, Source

DEFAULT_UPDATES_PER_ITERATION = 1_000


class DatasetState(NamedTuple):
    observations: PipelineState  # the dataset's statistics, frozen (or () without)


def dataset_statistics(observations: np.ndarray) -> RunningStats:
    """Mean and variance of every observation in the dataset (float32), as running stats."""
    observations = np.asarray(observations, np.float64)
    return RunningStats(
        jnp.float32(observations.shape[0]),
        jnp.asarray(observations.mean(axis=0), jnp.float32),
        jnp.asarray(observations.var(axis=0), jnp.float32),
    )


def through_pipeline(pipeline: ObservationPipeline, stats, steps) -> Any:
    """The steps [N] as the replay keeps them: one scan of ``pipeline.record`` over the
    dataset (a batch of one env): histories stacked, rewards scaled, not normalised."""

    def one(state, step):
        state, timestep = pipeline.record(state, jax.tree.map(lambda x: x[None], step), False)
        return state, jax.tree.map(lambda x: x[0], timestep)

    state = PipelineState(stats, pipeline.init(1).history)
    _, seen = jax.lax.scan(one, state, steps.timestep)
    return steps._replace(observation=seen.observation, reward=seen.reward)


def held_out_episodes(count: int, holdout: float, seed: int) -> tuple[int, ...]:
    """The indices of ``holdout`` of ``count`` episodes (a shuffle seeded by ``seed``; at
    least one held out and one kept)."""
    if count < 2:
        raise ConfigError(
            f"the dataset holds {count} episode: holding some out for evaluation needs at "
            "least 2 (one to train on, one to score on)"
        )
    order = np.random.default_rng(seed).permutation(count)
    held = min(max(1, int(round(holdout * count))), count - 1)
    return tuple(sorted(int(i) for i in order[:held]))


@dataclasses.dataclass(frozen=True)
class DatasetSource(Source):
    """``dataset``, checked against the evaluation env's spaces, replayed uniformly but for
    the episodes ``held_out_episodes`` (indices), kept apart as ``held_out_steps``."""

    dataset: Dataset
    pipeline: ObservationPipeline
    updates_per_iteration: int
    env_id: str
    held_out_episodes: tuple[int, ...] = ()

    def __post_init__(self):
        check_against_env(self.dataset, self.pipeline.env_spec, self.env_id)
        if self.pipeline.env_spec.action_mask:
            raise ConfigError(
                f"{self.env_id} gives action masks, and datasets do not keep them yet: "
                "learning from a dataset would take illegal actions as choices; train on the "
                "environment instead"
            )
        held = set(self.held_out_episodes)
        episodes = self.dataset.episodes
        training = [e for i, e in enumerate(episodes) if i not in held]
        object.__setattr__(self, "training_steps", sum(e.num_steps + 1 for e in training))
        # On the device once, before any program traces it (a constant of every program).
        steps, stats = self._experience(training)
        object.__setattr__(self, "experience", (steps, stats))
        if held:
            held_out = self._through_pipeline([episodes[i] for i in sorted(held)], stats)
            object.__setattr__(self, "held_out_steps", held_out)

    lanes = 1
    num_envs = 0  # no environment is stepped: no episodes to wait for before saving
    replayer = "uniform"
    collects = False

    @property
    def steps_per_iteration(self) -> int:
        return self.updates_per_iteration

    @property
    def learn_limit(self) -> int:
        return self.updates_per_iteration

    @property
    def replay_sizes(self) -> dict:
        return {
            "capacity": self.training_steps,
            "min_size": 0,
            "ratio": None,
        }

    @property
    def record(self) -> dict:
        record = {**self.dataset.summary(), "content_sha256": content_hash(self.dataset)}
        if self.held_out_episodes:
            record["held_out_episodes"] = list(self.held_out_episodes)
        return {"dataset": record}

    def _experience(self, episodes):
        """(the training episodes as the agent sees them [1, N] (one lane), their
        observation statistics): computed once, on the device."""
        steps = to_steps(episodes, self.pipeline.env_spec.action.dtype)
        stats = dataset_statistics(steps.observation) if self.pipeline.normalize else ()
        return jax.tree.map(lambda x: x[None], self._through_pipeline(episodes, stats)), stats

    def _through_pipeline(self, episodes, stats):
        """``episodes`` one after another [N], as the replay keeps steps."""
        steps = to_steps(episodes, self.pipeline.env_spec.action.dtype)
        pipeline = functools.partial(through_pipeline, self.pipeline)
        return jax.jit(pipeline)(stats, jax.tree.map(jnp.asarray, steps))

    def init(self, agent: Agent, agent_state, key):
        steps, stats = self.experience
        return DatasetState(PipelineState(stats, ())), steps

    def collect(self, agent: Agent, agent_state, state: DatasetState, key):
        return state, None

    def restart(self, agent: Agent, agent_state, state: DatasetState, key):
        return state

    def observations(self, state: DatasetState) -> PipelineState:
        return state.observations

    def view(self, state: DatasetState):
        return self.pipeline.view(state.observations)

    def episodes(self, state: DatasetState) -> EpisodeStats:
        return EpisodeStats.zeros(1)


def check_dataset_options(run) -> None:
    """The run options of a dataset: ``dataset`` and ``updates_per_iteration``."""
    if run.dataset is None:
        if run.updates_per_iteration is not None:
            raise ConfigError(
                "updates_per_iteration sets the gradient updates per iteration of an offline "
                "run: it needs --dataset (online, the replay ratio sets them)"
            )
        return
    if not run.dataset:
        raise ConfigError("dataset must be a directory path, got an empty string")
    if not run.separate_eval:
        raise ConfigError(
            "separate_eval=False reports training episodes as evaluations; an offline run "
            "has no training episodes: keep separate_eval True"
        )
    if run.normalize_rewards:
        raise ConfigError(
            "normalize_rewards keeps running statistics of the returns of the episodes a run "
            "collects; an offline run learns from the dataset's rewards as recorded: use "
            "reward_scale"
        )
    if run.replay not in (None, DatasetSource.replayer):
        raise ConfigError(
            f"an offline run replays its dataset uniformly; replay={run.replay!r} cannot "
            "serve it: drop --replay"
        )


def make_dataset_source(request: sources.Request) -> DatasetSource:
    """The run's dataset, for an agent that can learn from one."""
    agent, algo = request.agent, request.algo
    if agent.uses_prev_action:
        raise ConfigError(
            f"{algo} learns from the action before each step (prev_action), which datasets "
            "do not record; train it online"
        )
    if DatasetSource.replayer not in agent.replayers:
        raise ConfigError(
            f"{algo} learns on-policy ({', '.join(agent.replayers)} replay) and cannot train "
            "from a dataset, which is replayed uniformly; use an off-policy agent such as crr"
        )
    run = request.run
    updates = run.updates_per_iteration or DEFAULT_UPDATES_PER_ITERATION
    dataset = read_dataset(run.dataset)
    held_out = ()
    if agent.scoring is not None:
        held_out = held_out_episodes(dataset.num_episodes, agent.scoring.holdout, run.seed)
    return DatasetSource(dataset, request.pipeline, updates, run.env, held_out)


sources.register(
    sources.SourceKind(
        "dataset",
        lambda run: run.dataset is not None,
        check_dataset_options,
        make_dataset_source,
        collects=False,
    )
)
