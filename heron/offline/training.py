"""Offline training: the replay is filled from a dataset once; each iteration is
``updates_per_iteration`` optimiser steps on sequences sampled from it; the environment
serves only for evaluation.

The dataset's episodes go through the run's observation pipeline once (reward scaling,
history stacking; normalisation by the dataset's own mean and variance, which are then kept
frozen for evaluation) and into one lane of a ``uniform`` replay whose capacity is the
dataset's size. That replay state is shared by every seed (not copied per seed) and is not
part of the checkpoints: a resumed run reads the dataset again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.agents.base import Agent, ConfigError
from heron.envs.wrappers import ObservationPipeline, PipelineState, RunningStats
from heron.offline.dataset import Dataset, check_against_env, to_steps
from heron.replay import UniformReplay
from heron.training.loop import (
    SEED_AXIS,
    EpisodeStats,
    Program,
    TrainState,
    make_program,
    sample_and_update,
)


class OfflineData(NamedTuple):
    """A dataset ready to train from: its replay and the pipeline statistics it implies."""

    replay: UniformReplay  # one lane holding every step
    replay_state: Any  # leaves [1, N, ...]
    observation_stats: Any  # RunningStats of the dataset's observations, or ()
    summary: dict  # episodes, steps, return_mean, return_std of the dataset


def dataset_statistics(observations: np.ndarray) -> RunningStats:
    """Mean and variance of every observation in the dataset (float32), as running stats."""
    observations = np.asarray(observations, np.float64)
    return RunningStats(
        jnp.float32(observations.shape[0]),
        jnp.asarray(observations.mean(axis=0), jnp.float32),
        jnp.asarray(observations.var(axis=0), jnp.float32),
    )


def through_pipeline(pipeline: ObservationPipeline, stats, steps) -> Any:
    """The steps [N] as the agent sees them: one compiled scan of ``pipeline.apply`` over the
    dataset (a batch of one env), statistics frozen."""

    def one(state, step):
        state, timestep = pipeline.apply(state, jax.tree.map(lambda x: x[None], step), False)
        return state, jax.tree.map(lambda x: x[0], timestep)

    state = PipelineState(stats, pipeline.init(1).history)
    _, seen = jax.jit(lambda s, t: jax.lax.scan(one, s, t))(state, steps.timestep)
    return steps._replace(observation=seen.observation, reward=seen.reward)


def load_offline_data(
    dataset: Dataset, agent: Agent, pipeline: ObservationPipeline, env_id: str
) -> OfflineData:
    """Checks ``dataset`` against the env's spaces and fills a replay from it in one ``add``."""
    check_against_env(dataset, pipeline.env_spec, env_id)
    steps = to_steps(dataset.episodes, agent.spec.action.dtype)
    stats = dataset_statistics(steps.observation) if pipeline.normalize else ()
    steps = jax.tree.map(jnp.asarray, steps)
    steps = through_pipeline(pipeline, stats, steps)
    total = int(steps.step_type.shape[0])
    length = agent.schedule.mini_batch_length
    if total < length:
        raise ConfigError(
            f"the dataset holds {total} steps; {agent.name} samples sequences of "
            f"{length} steps ({agent.name}.mini_batch_length)"
        )
    replay = UniformReplay(capacity=total, num_envs=1)
    lane = jax.tree.map(lambda x: x[None], steps)  # [1, N, ...]
    replay_state = replay.add(replay.init(lane), lane)
    check_agent_can_learn(agent, replay, replay_state)
    return OfflineData(replay, replay_state, stats, dataset.summary())


def check_agent_can_learn(agent: Agent, replay, replay_state) -> None:
    """Traces (without running) the agent's preprocessing of a sampled mini-batch, so data
    it cannot learn from (e.g. SVG0 on a dataset without behaviour log-probabilities) is
    refused with the agent's own error before anything is written."""
    schedule = agent.schedule
    state = jax.eval_shape(agent.init, jax.random.PRNGKey(0))
    batch = jax.eval_shape(
        lambda replay_state, key: replay.sample(
            replay_state, key, schedule.mini_batch_size, schedule.mini_batch_length
        ),
        replay_state,
        jax.random.PRNGKey(0),
    )
    jax.eval_shape(agent.preprocess, state, batch)


def check_offline_run(agent: Agent, run) -> None:
    """What an offline run cannot do, refused before anything is written."""
    if not run.separate_eval:
        raise ConfigError(
            "separate_eval=False reports training episodes as evaluations; an offline run "
            "has no training episodes: keep separate_eval True"
        )
    schedule = agent.schedule
    if schedule.replay != "uniform":
        raise ConfigError(
            f"{agent.name} learns on-policy ({schedule.replay} replay) and cannot train from "
            "a dataset; offline training needs an off-policy agent such as crr"
        )
    if schedule.use_rollout_state:
        raise ConfigError(
            f"{agent.name}.use_rollout_state needs the recurrent states recorded when acting, "
            "which a dataset does not hold"
        )


def update_from_replay(agent: Agent, replay, replay_state, agent_state, key, num_updates: int):
    """``loop.sample_and_update``, counting the updates in the metrics."""
    agent_state, metrics = sample_and_update(
        agent, replay, replay_state, agent_state, key, num_updates
    )
    metrics["train/updates"] = jnp.float32(num_updates)
    return agent_state, metrics


def make_offline_program(
    agent: Agent,
    eval_env,
    temperatures,
    pipeline: ObservationPipeline,
    data: OfflineData,
    updates_per_iteration: int,
) -> Program:
    """K seeds in one compiled program, all sampling the same dataset replay; evaluation is
    the online program's (JAX or host environment)."""

    def init_one(key):
        agent_key, key = jax.random.split(key)
        return TrainState(
            agent_state=agent.init(agent_key),
            env_state=None,
            observations=PipelineState(data.observation_stats, ()),
            pending=(),
            carry=(),
            replay_state=(),
            stats=EpisodeStats.zeros(1),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
        )

    def iteration_one(state: TrainState, replay_state):
        key, learn_key = jax.random.split(state.key)
        agent_state, metrics = update_from_replay(
            agent, data.replay, replay_state, state.agent_state, learn_key, updates_per_iteration
        )
        new_state = state._replace(
            agent_state=agent_state,
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + updates_per_iteration,  # offline: updates
        )
        return new_state, metrics

    init = jax.jit(jax.vmap(init_one))
    compiled_iteration = jax.jit(
        jax.vmap(iteration_one, in_axes=(0, None), axis_name=SEED_AXIS), donate_argnums=0
    )
    online = make_program(agent, eval_env, eval_env, data.replay, temperatures, pipeline)
    return Program(
        init=init,
        iteration=lambda state: compiled_iteration(state, data.replay_state),
        evaluate=online.evaluate,
        restart=lambda state, key: state,  # no environment state to restore
        compiled_sizes=lambda: (init._cache_size(), compiled_iteration._cache_size()),
    )
