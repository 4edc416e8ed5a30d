"""The compiled pieces of the driver, shared by every agent and both environment kinds.

collect -> replay -> preprocess -> ``num_updates`` passes of shuffled mini-batches.
Every function here is pure; ``make_jax_iteration`` composes them into one iteration that
XLA compiles whole (environment steps included) for JAX environments.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from heron.agents.base import Agent
from heron.types import Experience, TimeStep


class EpisodeStats(NamedTuple):
    """Running returns per env [B] and cumulative totals over completed episodes."""

    episode_return: jax.Array  # [B]
    episode_length: jax.Array  # [B]
    completed: jax.Array  # int32: episodes completed so far
    return_sum: jax.Array  # float32: sum of their returns
    last_return: jax.Array  # float32: mean return of the episodes completed in the last step

    @classmethod
    def zeros(cls, num_envs: int) -> EpisodeStats:
        return cls(
            jnp.zeros(num_envs, jnp.float32),
            jnp.zeros(num_envs, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.float32),
            jnp.full((), jnp.nan, jnp.float32),
        )


def update_episode_stats(stats: EpisodeStats, timestep: TimeStep) -> EpisodeStats:
    first = timestep.is_first()
    last = timestep.is_last()
    episode_return = jnp.where(first, 0.0, stats.episode_return + timestep.reward)
    episode_length = jnp.where(first, 0, stats.episode_length + 1)
    n_last = jnp.sum(last)
    sum_last = jnp.sum(jnp.where(last, episode_return, 0.0))
    return EpisodeStats(
        episode_return=episode_return,
        episode_length=episode_length,
        completed=stats.completed + n_last.astype(jnp.int32),
        return_sum=stats.return_sum + sum_last,
        last_return=jnp.where(n_last > 0, sum_last / jnp.maximum(n_last, 1), stats.last_return),
    )


def act_and_record(agent: Agent, agent_state, timestep: TimeStep, carry, key):
    """Acts on ``timestep`` and returns the Experience step [B] and the new carry."""
    action, new_carry, extras = agent.act(agent_state, timestep, carry, key, mode="rollout")
    return Experience.from_timestep(timestep, action, extras), new_carry


def batch_major(experience):
    """[T, B, ...] -> [B, T, ...]."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), experience)


def join_unroll(pending: Experience, steps: Experience):
    """The acted-on step carried over from the last unroll, then T new steps [T, B] ->
    [B, T+1]: consecutive unrolls overlap by one step, which bootstraps the earlier one."""
    joined = jax.tree.map(lambda p, s: jnp.concatenate([p[None], s], axis=0), pending, steps)
    return batch_major(joined)


def train_on_batch(agent: Agent, agent_state, batch, key):
    """ALF's mini-batch loop: ``batch`` [B, T] -> sequences [N, L]; ``num_updates`` passes,
    each shuffled and split into mini-batches of ``mini_batch_size`` sequences, each given
    to ``agent.update`` time-major [L, M]. Once ``agent.stop_updates(metrics)`` is true the
    remaining updates of this call are skipped. Returns (state, mean metrics)."""
    schedule = agent.schedule
    length = schedule.mini_batch_length
    sequences = jax.tree.map(lambda x: x.reshape((-1, length) + x.shape[2:]), batch)
    n_sequences = jax.tree.leaves(sequences)[0].shape[0]
    n_minibatches = n_sequences // schedule.mini_batch_size

    def one_update(carry, inputs):
        state, stopped = carry
        minibatch, update_key = inputs
        minibatch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), minibatch)  # [L, M]

        def run(state):
            return agent.update(state, minibatch, update_key)

        metrics_shape = jax.eval_shape(run, state)[1]

        def skip(state):
            return state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)

        state, metrics = jax.lax.cond(stopped, skip, run, state)
        performed = ~stopped
        stopped = stopped | agent.stop_updates(metrics)
        return (state, stopped), (metrics, performed)

    def one_pass(carry, pass_key):
        shuffle_key, update_key = jax.random.split(pass_key)
        order = jax.random.permutation(shuffle_key, n_sequences)
        minibatches = jax.tree.map(
            lambda x: x[order].reshape((n_minibatches, schedule.mini_batch_size) + x.shape[1:]),
            sequences,
        )
        update_keys = jax.random.split(update_key, n_minibatches)
        return jax.lax.scan(one_update, carry, (minibatches, update_keys))

    pass_keys = jax.random.split(key, schedule.num_updates)
    (agent_state, _), (metrics, performed) = jax.lax.scan(
        one_pass, (agent_state, jnp.zeros((), bool)), pass_keys
    )
    weights = performed.astype(jnp.float32)
    n_performed = jnp.sum(weights)
    mean_metrics = jax.tree.map(
        lambda m: jnp.sum(m * weights) / jnp.maximum(n_performed, 1.0), metrics
    )
    mean_metrics["train/updates"] = n_performed
    return agent_state, mean_metrics


class TrainState(NamedTuple):
    """Everything a run needs to continue; saved whole in checkpoints."""

    agent_state: Any
    env_state: Any  # JAX env state; None for host (Gymnasium) environments
    pending: Experience  # [B]: the last step acted on, whose action is not yet executed
    carry: Any  # the agent's recurrent state after acting on ``pending``
    replay_state: Any
    stats: EpisodeStats
    key: jax.Array
    iteration: jax.Array  # int32
    env_steps: jax.Array  # int32 (env steps per env x num_envs)


def learn(agent: Agent, replay, state: TrainState, unroll, key):
    """replay -> preprocess -> mini-batch updates on an unroll [B, T+1]."""
    replay_state = replay.add(state.replay_state, unroll)
    experience = replay.replay_all(replay_state)
    replay_state = replay.clear(replay_state)
    batch = agent.preprocess(state.agent_state, experience)
    agent_state, metrics = train_on_batch(agent, state.agent_state, batch, key)
    return agent_state, replay_state, metrics


def make_jax_iteration(agent: Agent, env, replay):
    """One whole training iteration for a JAX env, to be jitted: (state) -> (state, metrics)."""
    unroll_length = agent.schedule.unroll_length

    def env_step(carry, _):
        agent_state, env_state, pending, agent_carry, stats, key = carry
        key, env_key, act_key = jax.random.split(key, 3)
        env_state, timestep = env.step(env_state, pending.action, env_key)
        stats = update_episode_stats(stats, timestep)
        step, agent_carry = act_and_record(agent, agent_state, timestep, agent_carry, act_key)
        return (agent_state, env_state, step, agent_carry, stats, key), step

    def iteration(state: TrainState):
        key, collect_key, learn_key = jax.random.split(state.key, 3)
        carry = (
            state.agent_state,
            state.env_state,
            state.pending,
            state.carry,
            state.stats,
            collect_key,
        )
        (_, env_state, pending, agent_carry, stats, _), steps = jax.lax.scan(
            env_step, carry, length=unroll_length
        )
        unroll = join_unroll(state.pending, steps)
        agent_state, replay_state, metrics = learn(agent, replay, state, unroll, learn_key)
        new_state = TrainState(
            agent_state=agent_state,
            env_state=env_state,
            pending=pending,
            carry=agent_carry,
            replay_state=replay_state,
            stats=stats,
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + unroll_length * env.num_envs,
        )
        return new_state, metrics

    return iteration


def init_train_state(agent: Agent, env, replay, key) -> TrainState:
    """Initial agent, environments (reset) and the first acted-on step; compiled as one
    program (environment reset included for JAX envs) to keep start-up short."""
    env_key, key = jax.random.split(key)
    reset = jax.jit(env.reset) if env.is_jax else env.reset
    env_state, timestep = reset(env_key)

    @jax.jit
    def initial_state(timestep, key):
        agent_key, act_key, key = jax.random.split(key, 3)
        agent_state = agent.init(agent_key)
        carry = agent.initial_carry(env.num_envs)
        pending, carry = act_and_record(agent, agent_state, timestep, carry, act_key)
        example = jax.tree.map(
            lambda x: jnp.zeros(
                (x.shape[0], agent.schedule.unroll_length + 1) + x.shape[1:], x.dtype
            ),
            pending,
        )
        return TrainState(
            agent_state=agent_state,
            env_state=None,
            pending=pending,
            carry=carry,
            replay_state=replay.init(example),
            stats=EpisodeStats.zeros(env.num_envs),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
        )

    return initial_state(timestep, key)._replace(env_state=env_state)


def make_host_iteration(agent: Agent, env, replay):
    """One training iteration for a host-stepped (Gymnasium) env: the envs step in Python
    (one vectorised call per step, no loop over envs), ``act`` and ``learn`` are compiled
    once and reused with fixed shapes."""
    unroll_length = agent.schedule.unroll_length

    @jax.jit
    def act_step(agent_state, timestep, carry, stats, key):
        key, act_key = jax.random.split(key)
        stats = update_episode_stats(stats, timestep)
        step, carry = act_and_record(agent, agent_state, timestep, carry, act_key)
        return step, carry, stats, key

    @jax.jit
    def finish(state: TrainState, steps, carry, stats, key):
        steps = jax.tree.map(lambda *xs: jnp.stack(xs), *steps)  # [T, B]
        key, learn_key = jax.random.split(key)
        unroll = join_unroll(state.pending, steps)
        agent_state, replay_state, metrics = learn(agent, replay, state, unroll, learn_key)
        new_state = TrainState(
            agent_state=agent_state,
            env_state=None,
            pending=jax.tree.map(lambda x: x[-1], steps),
            carry=carry,
            replay_state=replay_state,
            stats=stats,
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + unroll_length * env.num_envs,
        )
        return new_state, metrics

    def iteration(state: TrainState):
        carry, stats, key = state.carry, state.stats, state.key
        action = jax.device_get(state.pending.action)
        steps = []
        for _ in range(unroll_length):
            _, timestep = env.step(None, action)
            step, carry, stats, key = act_step(state.agent_state, timestep, carry, stats, key)
            action = jax.device_get(step.action)
            steps.append(step)
        return finish(state, steps, carry, stats, key)

    iteration.compiled_sizes = lambda: (act_step._cache_size(), finish._cache_size())
    return iteration
