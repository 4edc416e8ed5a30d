"""Observation and reward transforms between environments and agents, as pure functions
over an explicit state (so it is compiled with the run and saved in its checkpoints).

``ObservationPipeline`` stacks the last ``history`` observations (Trax's
``len_history_for_policy``; at an episode's FIRST step the history is filled with its first
observation), clips rewards to their sign (Atari's convention) and scales them for the
learner, normalises observations with running statistics, and may divide rewards by the
running standard deviation of the discounted return (SB3's
``VecNormalize(norm_reward=True)``); the statistics are updated only from training steps
(evaluation uses them frozen). Replays keep steps before normalisation; the
latest statistics normalise them whenever they are used (as ALF's normalisers and SB3's
off-policy buffers do). Episode returns are measured before any of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.specs import EnvSpec, normalized_entries
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

    def update_where(self, batch, mask) -> RunningStats:
        """Adds the entries of ``batch`` [B] where ``mask`` [B] holds (none: unchanged)."""
        weights = mask.astype(jnp.float32)
        batch_count = jnp.sum(weights)
        batch_mean = jnp.sum(batch * weights) / jnp.maximum(batch_count, 1.0)
        batch_var = jnp.sum((batch - batch_mean) ** 2 * weights) / jnp.maximum(batch_count, 1.0)
        total = self.count + batch_count
        safe_total = jnp.maximum(total, 1.0)
        delta = batch_mean - self.mean
        mean = self.mean + delta * batch_count / safe_total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta**2 * self.count * batch_count / safe_total
        )
        updated = RunningStats(total, mean, m2 / safe_total)
        return jax.tree.map(lambda new, old: jnp.where(batch_count > 0, new, old), updated, self)


class ReturnStats(NamedTuple):
    """Each environment's running discounted return and the statistics of those returns
    (SB3's ``VecNormalize.returns`` and ``ret_rms``)."""

    returns: jax.Array  # [B]
    stats: RunningStats  # of the returns: shape ()


class PipelineState(NamedTuple):
    stats: Any  # RunningStats, or () without normalisation
    history: Any  # [B, history, *obs], or () without history
    returns: Any = ()  # ReturnStats, or () without reward normalisation


@dataclasses.dataclass(frozen=True)
class ObservationPipeline:
    env_spec: EnvSpec
    normalize: bool = False
    history: int = 1
    reward_scale: float = 1.0
    clip: float = 10.0
    normalize_rewards: bool = False
    discount: float = 0.99  # of the returns whose standard deviation divides the rewards
    clip_rewards: bool = False  # the learner sees the rewards' signs

    @property
    def spec(self) -> EnvSpec:
        """The EnvSpec agents see: observations [history, *obs] when stacking; normalised
        observations are float32 and no longer categories."""
        shape = self.env_spec.observation_shape
        if self.history > 1:
            shape = (self.history,) + shape
        categories = None if self.normalize else self.env_spec.observation_categories
        return dataclasses.replace(
            self.env_spec,
            observation_shape=shape,
            observation_dtype=jnp.float32 if self.normalize else self.recorded_dtype,
            observation_categories=categories,
        )

    @property
    def recorded_dtype(self):
        """The dtype of recorded observations: uint8 images stay uint8 (see specs.
        observation_dtype_from_space); anything else is float32."""
        return jnp.uint8 if np.dtype(self.env_spec.observation_dtype) == np.uint8 else jnp.float32

    @property
    def stacks_frames(self) -> bool:
        """Whether it stacks uint8 images, which a uniform replay keeps one frame a step of
        (``UniformReplay.frame_history``)."""
        return self.history > 1 and self.recorded_dtype == jnp.uint8

    def init(self, num_envs: int) -> PipelineState:
        shape = self.env_spec.observation_shape
        stats = RunningStats.zeros(shape) if self.normalize else ()
        history = ()
        if self.history > 1:
            history = jnp.zeros((num_envs, self.history) + shape, self.recorded_dtype)
        returns = ()
        if self.normalize_rewards:
            returns = ReturnStats(jnp.zeros(num_envs, jnp.float32), RunningStats.zeros(()))
        return PipelineState(stats, history, returns)

    def with_history_for(self, state: PipelineState, num_envs: int) -> PipelineState:
        """The same statistics with a fresh history (and returns) for ``num_envs`` other
        environments."""
        fresh = self.init(num_envs)
        returns = state.returns
        if self.normalize_rewards:
            returns = ReturnStats(fresh.returns.returns, state.returns.stats)
        return state._replace(history=fresh.history, returns=returns)

    def record(self, state: PipelineState, timestep: TimeStep, update_stats: bool):
        """(state, raw TimeStep [B]) -> (state, TimeStep as the replay keeps it): the last
        ``history`` raw observations stacked, rewards scaled, the statistics updated from the
        raw observations (``update_stats``); not normalised: that is done with the latest
        statistics whenever the step is used (``normalize``), as ALF re-applies its
        observation transforms to replayed experience. Under ``normalize_rewards`` each
        environment's discounted return of the raw rewards is accumulated (from 0 at its
        FIRST steps, which do not count) and its statistics updated (``update_stats``)."""
        observation = jnp.asarray(timestep.observation, self.recorded_dtype)
        stats = state.stats
        if self.normalize and update_stats:
            stats = stats.update(observation.astype(jnp.float32))
        first = timestep.step_type == StepType.FIRST
        history = state.history
        if self.history > 1:
            shifted = jnp.concatenate([history[:, 1:], observation[:, None]], axis=1)
            filled = jnp.repeat(observation[:, None], self.history, axis=1)
            mask = first.reshape((-1,) + (1,) * (shifted.ndim - 1))
            history = jnp.where(mask, filled, shifted)
            observation = history
        raw_reward = jnp.asarray(timestep.reward, jnp.float32)
        returns = state.returns
        if self.normalize_rewards and update_stats:
            running = jnp.where(first, 0.0, returns.returns * self.discount + raw_reward)
            returns = ReturnStats(running, returns.stats.update_where(running, ~first))
        reward = jnp.sign(raw_reward) if self.clip_rewards else raw_reward
        return PipelineState(stats, history, returns), timestep._replace(
            observation=observation, reward=reward * self.reward_scale
        )

    def normalize_observation(self, stats, observation):
        """Observations [..., (history,) *obs] normalised by ``stats`` (unchanged without
        normalisation)."""
        if not self.normalize:
            return observation
        scaled = (observation - stats.mean) / jnp.sqrt(stats.var + 1e-8)
        scaled = jnp.clip(scaled, -self.clip, self.clip)
        entries = normalized_entries(self.env_spec.observation_parts)
        if entries is not None:  # a Dict's images and categories are the network's to read
            scaled = jnp.where(entries, scaled, observation)
        return scaled

    def normalize_reward(self, returns, reward):
        """Rewards divided by the standard deviation of the discounted returns, clipped to
        +-clip (SB3's ``normalize_reward``; unchanged without reward normalisation)."""
        if not self.normalize_rewards:
            return reward
        scaled = reward / jnp.sqrt(returns.stats.var + 1e-8)
        return jnp.clip(scaled, -self.clip, self.clip)

    def view(self, state: PipelineState):
        """``experience -> experience`` with observations (and rewards) normalised by the
        statistics of ``state``: what an agent sees of recorded steps."""

        def normalized(experience):
            observation = self.normalize_observation(state.stats, experience.observation)
            reward = self.normalize_reward(state.returns, experience.reward)
            return experience._replace(observation=observation, reward=reward)

        return normalized

    def apply(self, state: PipelineState, timestep: TimeStep, update_stats: bool):
        """(state, raw TimeStep [B]) -> (state, TimeStep as the agent sees it)."""
        state, recorded = self.record(state, timestep, update_stats)
        return state, self.view(state)(recorded)
