"""Sources of experience: where the steps the driver adds to the replay come from.

A source is one declared protocol, ``Source``: pure functions the driver compiles into every
iteration, and what the driver needs to know about it. The compiled program and the driver
use every member alike and never ask which source they hold:

    source_state, steps = source.init(agent, agent_state, key)                  # first steps
    source_state, steps = source.collect(agent, agent_state, source_state, key)  # an iteration's
    replay_state = source.add(replay, replay_state, steps, first)                # into the replay
    source_state = source.restart(agent, agent_state, source_state, key)         # after a resume

``EnvSource`` steps environments (JAX envs, or Gymnasium envs through host callbacks); other
packages provide the rest (``heron.offline``: a dataset; ``heron.distributed``: actors on
other machines). Which one a run uses is the ``RunConfig``'s choice: each registers a
``heron.sources.SourceKind`` with the options it reads.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from heron import sources
from heron.agents.base import Agent
from heron.envs.wrappers import ObservationPipeline, PipelineState
from heron.types import Experience, TimeStep


class EpisodeStats(NamedTuple):
    """Running returns per env [B] and cumulative totals over completed episodes."""

    episode_return: jax.Array  # [B]
    episode_length: jax.Array  # [B]
    completed: jax.Array  # int32: episodes completed so far (terminated or truncated)
    return_sum: jax.Array  # float32: sum of their returns
    return_sq_sum: jax.Array  # float32: sum of their squared returns
    # int32: episodes the environment ended, in a terminal state or at its own time limit
    # (Trax's "done": old gym's TimeLimit reported done); not those cut by --max-timestep
    # (Trax's truncation).
    done: jax.Array

    @classmethod
    def zeros(cls, num_envs: int) -> EpisodeStats:
        return cls(
            jnp.zeros(num_envs, jnp.float32),
            jnp.zeros(num_envs, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.int32),
        )

    def update(self, timestep: TimeStep, cut_at: int | None = None) -> EpisodeStats:
        """Counts the raw step [B] (rewards before any scaling); ``cut_at``: the run's
        ``max_timestep``, whose truncations are not ``done``."""
        first, last = timestep.is_first(), timestep.is_last()
        episode_return = jnp.where(first, 0.0, self.episode_return + timestep.reward)
        episode_length = jnp.where(first, 0, self.episode_length + 1)
        ended = jnp.where(last, episode_return, 0.0)
        done = last
        if cut_at is not None:
            done = last & ((timestep.discount == 0) | (episode_length < cut_at))
        return EpisodeStats(
            episode_return=episode_return,
            episode_length=episode_length,
            completed=self.completed + jnp.sum(last).astype(jnp.int32),
            return_sum=self.return_sum + jnp.sum(ended),
            return_sq_sum=self.return_sq_sum + jnp.sum(ended**2),
            done=self.done + jnp.sum(done).astype(jnp.int32),
        )


class Source(abc.ABC):
    """The source protocol. Abstract members every source defines; the others have the
    defaults of a source that steps its own environments in this process.

    ``steps`` are [lanes, T] (every lane's new steps), or what the source's ``add`` and
    ``lanes_of`` read (several actors' unrolls: ``heron.distributed.source.ActorSteps``).
    """

    lanes: int  # the replay's environments (lanes of steps)
    num_envs: int  # environments stepped; their episodes are counted (0: none)
    steps_per_iteration: int  # what an iteration counts towards ``--steps``
    learn_limit: int | None = None  # most learning steps per iteration; None: the replay's rate
    resume_note: str | None = None  # said when a resumed run cannot continue exactly
    replayer: str | None = None  # the replayer it needs; None: the run's or the agent's own
    # steps [N] kept out of the replay to score a model on (a dataset's held-out episodes)
    held_out_steps: Any = None
    # False: the steps of ``init`` are all there is (a dataset), ``collect`` returns none
    collects: ClassVar[bool] = True
    # False: the host sees every iteration (one call of the compiled program each), where
    # the driver would otherwise run several in one call (``driver.HOST_VISIT_STEPS``)
    iterations_in_one_call: ClassVar[bool] = True

    @property
    def replay_sizes(self) -> dict:
        """``ReplaySizes`` fields it needs of the replay (e.g. a dataset's capacity)."""
        return {}

    @property
    def record(self) -> dict:
        """config.json entries it adds (e.g. the dataset it replays)."""
        return {}

    @property
    def failure(self) -> BaseException | None:
        """Why its processes stopped the run (raised from inside the compiled iteration)."""
        return None

    def start(self) -> None:  # noqa: B027  (optional)
        """Starts its processes, before the run writes anything."""

    def close(self) -> None:  # noqa: B027  (optional)
        """Stops them, however the run ended."""

    @abc.abstractmethod
    def init(self, agent: Agent, agent_state, key) -> tuple[Any, Any]:
        """(source state, the first steps [lanes, t0]: they begin the replay's streams)."""

    @abc.abstractmethod
    def collect(self, agent: Agent, agent_state, source_state, key) -> tuple[Any, Any]:
        """(source state, one iteration's new steps; None when it ``collects`` nothing)."""

    @abc.abstractmethod
    def restart(self, agent: Agent, agent_state, source_state, key) -> Any:
        """The source state of a resumed run, where its environments restart."""

    @abc.abstractmethod
    def observations(self, source_state) -> PipelineState:
        """The observation pipeline's state (statistics the policy evaluates with)."""

    @abc.abstractmethod
    def view(self, source_state) -> Callable:
        """What an agent sees of the steps it added (observations normalised with the
        latest statistics)."""

    @abc.abstractmethod
    def episodes(self, source_state) -> EpisodeStats:
        """The episode statistics."""

    def last_steps(self, source_state):
        """The step each lane last acted on [lanes, 1] (after ``init``: its first)."""
        raise NotImplementedError(f"{type(self).__name__} acts on no steps")

    def add(self, replay, replay_state, steps, first: bool = False):
        """``steps`` into the replay; ``first``: they begin new streams (``replay.start``)."""
        return (replay.start if first else replay.add)(replay_state, steps)

    def lanes_of(self, steps):
        """``steps`` as [lanes, T], for what looks at every step (checks, observers)."""
        return steps

    def collected(self, steps) -> int:
        """Environment steps in ``steps``."""
        return math.prod(self.lanes_of(steps).step_type.shape)

    def metrics(self, source_state) -> dict:
        """Logged with every iteration."""
        return {}

    def summary(self, source_state) -> dict:
        """Added to the final JSON line (``source_state``: one seed's)."""
        return {}


class EnvSourceState(NamedTuple):
    env_state: Any  # the environments' state (a dummy for host environments)
    observations: PipelineState  # normalisation statistics and observation history
    pending: Experience  # [B]: the last step acted on, whose action is not yet executed
    carry: Any  # the agent's recurrent state after acting on ``pending``
    stats: EpisodeStats


@dataclasses.dataclass(frozen=True)
class EnvSource(Source):
    """``num_envs`` environments stepped ``unroll_length`` times per iteration by the
    agent's ``act``; observations go through ``pipeline`` first (episode statistics are
    taken before it, on the raw rewards). ``cut_at``: the run's ``max_timestep``."""

    env: Any
    pipeline: ObservationPipeline
    unroll_length: int
    cut_at: int | None = None

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    @property
    def lanes(self) -> int:
        return self.env.num_envs

    @property
    def steps_per_iteration(self) -> int:
        return self.unroll_length * self.env.num_envs

    @property
    def resume_note(self) -> str | None:
        if self.env.is_jax:
            return None
        return (
            "Gymnasium environments cannot be saved in a checkpoint: their episodes restart "
            "on resume"
        )

    def _observe_and_act(
        self, agent: Agent, agent_state, raw: TimeStep, observations, carry, stats, key,
        previous_action=None,
    ):  # fmt: skip
        """Episode statistics on the raw step, the step as the replay keeps it (with the
        action before it, ``previous_action``, for agents that ask), and the action taken on
        its normalised view."""
        stats = stats.update(raw, self.cut_at)
        observations, recorded = self.pipeline.record(observations, raw, update_stats=True)
        timestep = self.pipeline.view(observations)(recorded)
        action, new_carry, extras = agent.act(agent_state, timestep, carry, key)
        prev_action = ()
        if agent.uses_prev_action:
            before = jnp.zeros_like(action) if previous_action is None else previous_action
            first = raw.is_first().reshape(raw.is_first().shape + (1,) * (action.ndim - 1))
            prev_action = jnp.where(first, jnp.zeros_like(action), before)
        step = Experience.from_timestep(recorded, action, extras, prev_action=prev_action)
        return step, observations, new_carry, stats

    def init(self, agent: Agent, agent_state, key):
        """Fresh environments whose first step the agent has acted on: that step is the first
        to enter the replay."""
        env_key, act_key = jax.random.split(key)
        env_state, raw = self.env.reset(env_key)
        step, observations, carry, stats = self._observe_and_act(
            agent,
            agent_state,
            raw,
            self.pipeline.init(self.num_envs),
            agent.initial_carry(self.num_envs),
            EpisodeStats.zeros(self.num_envs),
            act_key,
        )
        state = EnvSourceState(env_state, observations, step, carry, stats)
        return state, jax.tree.map(lambda x: x[:, None], step)

    def collect(self, agent: Agent, agent_state, state: EnvSourceState, key):
        """``unroll_length`` new steps [B, T], each acted on."""

        def one_step(carry, step_key):
            env_state, observations, pending, agent_carry, stats = carry
            env_key, act_key = jax.random.split(step_key)
            env_state, raw = self.env.step(env_state, pending.action, env_key)
            step, observations, agent_carry, stats = self._observe_and_act(
                agent, agent_state, raw, observations, agent_carry, stats, act_key, pending.action
            )
            return EnvSourceState(env_state, observations, step, agent_carry, stats), step

        keys = jax.random.split(key, self.unroll_length)
        state, steps = jax.lax.scan(one_step, state, keys)
        return state, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps)  # [B, T]

    def restart(self, agent: Agent, agent_state, state: EnvSourceState, key):
        """After a resume: JAX environments continue exactly where the checkpoint left them;
        host environments (whose state was not saved) start new episodes at the next step,
        whose FIRST steps are collected like any others (the step before them, the
        checkpoint's pending step, bootstraps nothing across the restart)."""
        del agent, agent_state
        if self.env.is_jax:
            return state
        return state._replace(env_state=self.env.restart(state.env_state, key))

    def last_steps(self, state: EnvSourceState):
        """The step each environment last acted on [B, 1] (after ``init``: its first)."""
        return jax.tree.map(lambda x: x[:, None], state.pending)

    def observations(self, state: EnvSourceState) -> PipelineState:
        return state.observations

    def view(self, state: EnvSourceState):
        return self.pipeline.view(state.observations)

    def episodes(self, state: EnvSourceState) -> EpisodeStats:
        return state.stats


sources.register(
    sources.SourceKind(
        "environments",
        lambda run: False,  # the source of a run that asks for no other
        lambda run: None,
        lambda request: EnvSource(
            request.env, request.pipeline, request.agent.unroll_length, request.run.max_timestep
        ),
    )
)
