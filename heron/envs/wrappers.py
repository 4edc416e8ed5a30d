"""Observation and reward transforms between environments and agents, as pure functions
over an explicit state (so it is compiled with the run and saved in its checkpoints).

``ObservationPipeline`` stacks the last ``history`` observations (Trax's
``len_history_for_policy``; at an episode's FIRST step the history is filled with its first
observation), scales rewards for the learner, and normalises observations with running
statistics (updated only from training steps; evaluation uses them frozen). Replays keep
steps before normalisation; the latest statistics normalise them whenever they are used.
Episode returns are measured before the reward scaling.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from heron.specs import EnvSpec
from heron.types import StepType, TimeStep


class RunningStats(NamedTuple):
    """Mean and variance of observations seen so far (Chan et al.'s parallel update)."""

    count: jax.Array  # float32
    mean: jax.Array  # [*obs]
    var: jax.Array  # [*obs]

    @classmethod
    def zeros(cls, shape) -> RunningStats:
        return cls(
            jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32)
        )

    def update(self, batch) -> RunningStats:
        """Adds a batch [B, *obs] of observations."""
        batch_count = jnp.float32(batch.shape[0])
        batch_mean = jnp.mean(batch, axis=0)
        batch_var = jnp.var(batch, axis=0)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta**2 * self.count * batch_count / total
        )
        return RunningStats(total, mean, m2 / total)


class PipelineState(NamedTuple):
    stats: Any  # RunningStats, or () without normalisation
    history: Any  # [B, history, *obs], or () without history


@dataclasses.dataclass(frozen=True)
class ObservationPipeline:
    env_spec: EnvSpec
    normalize: bool = False
    history: int = 1
    reward_scale: float = 1.0
    clip: float = 10.0

    @property
    def spec(self) -> EnvSpec:
        """The EnvSpec agents see: observations [history, *obs] when stacking; normalised
        observations are no longer categories."""
        shape = self.env_spec.observation_shape
        if self.history > 1:
            shape = (self.history,) + shape
        categories = None if self.normalize else self.env_spec.observation_categories
        return dataclasses.replace(
            self.env_spec,
            observation_shape=shape,
            observation_dtype=jnp.float32,
            observation_categories=categories,
        )

    def init(self, num_envs: int) -> PipelineState:
        shape = self.env_spec.observation_shape
        stats = RunningStats.zeros(shape) if self.normalize else ()
        history = (
            jnp.zeros((num_envs, self.history) + shape, jnp.float32) if self.history > 1 else ()
        )
        return PipelineState(stats, history)

    def with_history_for(self, state: PipelineState, num_envs: int) -> PipelineState:
        """The same statistics with a fresh history for ``num_envs`` other environments."""
        return state._replace(history=self.init(num_envs).history)

    def record(self, state: PipelineState, timestep: TimeStep, update_stats: bool):
        """(state, raw TimeStep [B]) -> (state, TimeStep as the replay keeps it): the last
        ``history`` raw observations stacked, rewards scaled, the statistics updated from the
        raw observations (``update_stats``); not normalised: that is done with the latest
        statistics whenever the step is used (``normalize``), as ALF re-applies its
        observation transforms to replayed experience."""
        observation = jnp.asarray(timestep.observation, jnp.float32)
        stats = state.stats
        if self.normalize and update_stats:
            stats = stats.update(observation)
        history = state.history
        if self.history > 1:
            first = timestep.step_type == StepType.FIRST
            shifted = jnp.concatenate([history[:, 1:], observation[:, None]], axis=1)
            filled = jnp.repeat(observation[:, None], self.history, axis=1)
            mask = first.reshape((-1,) + (1,) * (shifted.ndim - 1))
            history = jnp.where(mask, filled, shifted)
            observation = history
        reward = jnp.asarray(timestep.reward, jnp.float32) * self.reward_scale
        return PipelineState(stats, history), timestep._replace(
            observation=observation, reward=reward
        )

    def normalize_observation(self, stats, observation):
        """Observations [..., (history,) *obs] normalised by ``stats`` (unchanged without
        normalisation)."""
        if not self.normalize:
            return observation
        scaled = (observation - stats.mean) / jnp.sqrt(stats.var + 1e-8)
        return jnp.clip(scaled, -self.clip, self.clip)

    def view(self, stats):
        """``experience -> experience`` with observations normalised by ``stats``: what an
        agent sees of recorded steps."""

        def normalized(experience):
            observation = self.normalize_observation(stats, experience.observation)
            return experience._replace(observation=observation)

        return normalized

    def apply(self, state: PipelineState, timestep: TimeStep, update_stats: bool):
        """(state, raw TimeStep [B]) -> (state, TimeStep as the agent sees it)."""
        state, recorded = self.record(state, timestep, update_stats)
        return state, self.view(state.stats)(recorded)
