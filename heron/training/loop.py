"""The compiled pieces of the driver, shared by every agent and both environment kinds.

collect -> replay -> preprocess -> ``num_updates`` passes of shuffled mini-batches.
Every function here is pure; ``make_jax_iteration`` composes them into one iteration that
XLA compiles whole (environment steps included) for JAX environments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from heron import parallel
from heron.agents.base import Agent, ConfigError
from heron.envs.wrappers import ObservationPipeline, PipelineState
from heron.training.evaluation import make_host_evaluate, make_jax_evaluate
from heron.types import Experience, TimeStep


class EpisodeStats(NamedTuple):
    """Running returns per env [B] and cumulative totals over completed episodes."""

    episode_return: jax.Array  # [B]
    episode_length: jax.Array  # [B]
    completed: jax.Array  # int32: episodes completed so far
    return_sum: jax.Array  # float32: sum of their returns
    return_sq_sum: jax.Array  # float32: sum of their squared returns

    @classmethod
    def zeros(cls, num_envs: int) -> EpisodeStats:
        return cls(
            jnp.zeros(num_envs, jnp.float32),
            jnp.zeros(num_envs, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.float32),
        )


def update_episode_stats(stats: EpisodeStats, timestep: TimeStep) -> EpisodeStats:
    first = timestep.is_first()
    last = timestep.is_last()
    episode_return = jnp.where(first, 0.0, stats.episode_return + timestep.reward)
    episode_length = jnp.where(first, 0, stats.episode_length + 1)
    ended = jnp.where(last, episode_return, 0.0)
    return EpisodeStats(
        episode_return=episode_return,
        episode_length=episode_length,
        completed=stats.completed + jnp.sum(last).astype(jnp.int32),
        return_sum=stats.return_sum + jnp.sum(ended),
        return_sq_sum=stats.return_sq_sum + jnp.sum(ended**2),
    )


def act_and_record(agent: Agent, agent_state, timestep: TimeStep, carry, key):
    """Acts on ``timestep`` and returns the Experience step [B] and the new carry."""
    action, new_carry, extras = agent.act(agent_state, timestep, carry, key, mode="rollout")
    rollout_state = carry if agent.schedule.use_rollout_state else ()
    return Experience.from_timestep(timestep, action, extras, rollout_state), new_carry


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

        if agent.stop_updates is None:  # nothing can stop the updates early
            state, metrics = run(state)
            return (state, stopped), (metrics, ~stopped)

        def skip(state):
            metrics_shape = jax.eval_shape(run, state)[1]
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


SEED_AXIS = "seeds"  # the vmapped axis of independent runs in every Program


class TrainState(NamedTuple):
    """Everything a run needs to continue; saved whole in checkpoints."""

    agent_state: Any
    env_state: Any  # JAX env state; None for host (Gymnasium) environments
    observations: PipelineState  # normalisation statistics and observation history
    pending: Experience  # [B]: the last step acted on, whose action is not yet executed
    carry: Any  # the agent's recurrent state after acting on ``pending``
    replay_state: Any
    stats: EpisodeStats
    key: jax.Array
    iteration: jax.Array  # int32
    env_steps: jax.Array  # int32 (env steps per env x num_envs)


def learn(agent: Agent, replay, state: TrainState, unroll, key):
    """Hands an unroll [B, T+1] to the replay and trains on what the replay gives back."""
    if agent.schedule.replay == "one_time":
        return learn_on_policy(agent, replay, state, unroll, key)
    return learn_off_policy(agent, replay, state, unroll, key)


def learn_on_policy(agent: Agent, replay, state: TrainState, unroll, key):
    """replay everything once, then clear it -> preprocess -> mini-batch passes."""
    replay_state = replay.add(state.replay_state, unroll)
    experience = replay.replay_all(replay_state)
    replay_state = replay.clear(replay_state)
    batch = agent.preprocess(state.agent_state, experience)
    agent_state, metrics = train_on_batch(agent, state.agent_state, batch, key)
    return agent_state, replay_state, metrics


def sample_and_update(agent: Agent, replay, replay_state, agent_state, key, num_updates: int):
    """``num_updates`` optimiser steps, each on ``mini_batch_size`` sequences of
    ``mini_batch_length`` steps sampled afresh from ``replay_state`` (time-major [L, M] for
    ``agent.update``); returns (agent_state, metrics averaged over the updates)."""
    size, length = agent.schedule.mini_batch_size, agent.schedule.mini_batch_length

    def one_update(agent_state, update_key):
        sample_key, update_key = jax.random.split(update_key)
        batch = agent.preprocess(agent_state, replay.sample(replay_state, sample_key, size, length))
        batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
        return agent.update(agent_state, batch, update_key)

    agent_state, metrics = jax.lax.scan(one_update, agent_state, jax.random.split(key, num_updates))
    return agent_state, jax.tree.map(jnp.mean, metrics)


def learn_off_policy(agent: Agent, replay, state: TrainState, unroll, key):
    """Adds the unroll's new steps to a sampling replay; once ``min_replay_size`` steps are
    stored, ``num_updates`` optimiser steps, each on ``mini_batch_size`` sequences of
    ``mini_batch_length`` steps drawn afresh (time-major [L, M] for ``agent.update``)."""
    schedule = agent.schedule
    length = schedule.mini_batch_length
    # Consecutive unrolls overlap by one step: its last step is the next one's first.
    replay_state = replay.add(state.replay_state, jax.tree.map(lambda x: x[:, :-1], unroll))
    stored = replay.size(replay_state) * replay.num_envs
    ready = (stored >= schedule.min_replay_size) & (
        replay.num_valid_starts(replay_state, length) > 0
    )
    # Every seed fills its replay at the same pace; agreeing on that across the seed axis
    # keeps ``ready`` unbatched, so the cond below skips the updates instead of computing
    # and discarding them (a batched predicate turns a cond into a select).
    ready = jax.lax.pmin(ready.astype(jnp.int32), SEED_AXIS) > 0

    def train(agent_state):
        return sample_and_update(
            agent, replay, replay_state, agent_state, key, schedule.num_updates
        )

    def wait(agent_state):
        metrics_shape = jax.eval_shape(train, agent_state)[1]
        return agent_state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)

    agent_state, metrics = jax.lax.cond(ready, train, wait, state.agent_state)
    metrics["train/updates"] = jnp.where(ready, schedule.num_updates, 0).astype(jnp.float32)
    return agent_state, replay_state, metrics


def observe_and_act(
    agent: Agent,
    pipeline: ObservationPipeline,
    agent_state,
    raw: TimeStep,
    observations,
    carry,
    stats,
    key,
):
    """Episode statistics on the raw step, the pipeline's view of it, and the agent's action."""
    stats = update_episode_stats(stats, raw)
    observations, timestep = pipeline.apply(observations, raw, update_stats=True)
    step, carry = act_and_record(agent, agent_state, timestep, carry, key)
    return step, observations, carry, stats


def learn_from_unroll(
    agent: Agent, replay, state: TrainState, steps: Experience, key, learn_key, **changes
):
    """Joins the T new steps [T, B] to the pending one, learns from the unroll and advances
    the state (iteration, env steps, key, pending step, and the given ``changes``)."""
    unroll = join_unroll(state.pending, steps)
    agent_state, replay_state, metrics = learn(agent, replay, state, unroll, learn_key)
    unroll_length, num_envs = steps.step_type.shape
    new_state = state._replace(
        agent_state=agent_state,
        replay_state=replay_state,
        pending=jax.tree.map(lambda x: x[-1], steps),
        key=key,
        iteration=state.iteration + 1,
        env_steps=state.env_steps + unroll_length * num_envs,
        **changes,
    )
    return new_state, metrics


def make_jax_iteration(agent: Agent, env, replay, pipeline: ObservationPipeline):
    """One whole training iteration for a JAX env (unbatched over seeds): state -> (state,
    metrics), environment steps included, for XLA to compile whole."""
    unroll_length = agent.schedule.unroll_length

    def env_step(carry, _):
        agent_state, env_state, observations, pending, agent_carry, stats, key = carry
        key, env_key, act_key = jax.random.split(key, 3)
        env_state, raw = env.step(env_state, pending.action, env_key)
        step, observations, agent_carry, stats = observe_and_act(
            agent, pipeline, agent_state, raw, observations, agent_carry, stats, act_key
        )
        return (agent_state, env_state, observations, step, agent_carry, stats, key), step

    def iteration(state: TrainState):
        key, collect_key, learn_key = jax.random.split(state.key, 3)
        carry = (
            state.agent_state,
            state.env_state,
            state.observations,
            state.pending,
            state.carry,
            state.stats,
            collect_key,
        )
        (_, env_state, observations, _, agent_carry, stats, _), steps = jax.lax.scan(
            env_step, carry, length=unroll_length
        )
        return learn_from_unroll(
            agent,
            replay,
            state,
            steps,
            key,
            learn_key,
            env_state=env_state,
            observations=observations,
            carry=agent_carry,
            stats=stats,
        )

    return iteration


def initial_state(
    agent: Agent,
    replay,
    pipeline: ObservationPipeline,
    num_envs: int,
    env_state,
    raw: TimeStep,
    key,
) -> TrainState:
    """A run's first state (unbatched over seeds): a fresh agent that has acted on the
    environments' first step."""
    agent_key, act_key, key = jax.random.split(key, 3)
    agent_state = agent.init(agent_key)
    step, observations, carry, stats = observe_and_act(
        agent,
        pipeline,
        agent_state,
        raw,
        pipeline.init(num_envs),
        agent.initial_carry(num_envs),
        EpisodeStats.zeros(num_envs),
        act_key,
    )
    example = jax.tree.map(
        lambda x: jnp.zeros((x.shape[0], agent.schedule.unroll_length + 1) + x.shape[1:], x.dtype),
        step,
    )
    return TrainState(
        agent_state=agent_state,
        env_state=env_state,
        observations=observations,
        pending=step,
        carry=carry,
        replay_state=replay.init(example),
        stats=stats,
        key=key,
        iteration=jnp.zeros((), jnp.int32),
        env_steps=jnp.zeros((), jnp.int32),
    )


class Program(NamedTuple):
    """The compiled pieces of a run. States and keys carry a leading seed axis [K].

    init(keys [K]) -> state; iteration(state) -> (state, metrics [K]);
    evaluate(state, keys [K]) -> returns [K, n_temperatures, n_episodes];
    restart(state, key) -> state with fresh episodes (host environments after a resume).
    """

    init: Callable
    iteration: Callable
    evaluate: Callable
    restart: Callable
    compiled_sizes: Callable


def _cache_sizes(*functions) -> Callable:
    return lambda: tuple(f._cache_size() for f in functions)


def make_jax_program(
    agent: Agent, env, eval_env, replay, temperatures, pipeline: ObservationPipeline
) -> Program:
    """K seeds in one compiled program: every piece is vmapped over the seed axis."""

    def init_one(key):
        env_key, key = jax.random.split(key)
        env_state, raw = env.reset(env_key)
        return initial_state(agent, replay, pipeline, env.num_envs, env_state, raw, key)

    evaluate_one = make_jax_evaluate(agent, eval_env, temperatures, pipeline)
    init = jax.jit(jax.vmap(init_one))
    iteration = jax.jit(
        jax.vmap(make_jax_iteration(agent, env, replay, pipeline), axis_name=SEED_AXIS),
        donate_argnums=0,
    )
    evaluate = jax.jit(
        jax.vmap(lambda state, key: evaluate_one(state.agent_state, state.observations, key))
    )
    return Program(
        init=init,
        iteration=iteration,
        evaluate=evaluate,
        restart=lambda state, key: state,  # JAX env states are saved with the run
        compiled_sizes=_cache_sizes(init, iteration, evaluate),
    )


def make_host_program(
    agent: Agent, env, eval_env, replay, temperatures, pipeline: ObservationPipeline
) -> Program:
    """One seed, Gymnasium environments stepped on the host: one vectorised call per step (no
    loop over envs); ``act`` and ``learn`` compiled once, with a seed axis of 1."""
    unroll_length = agent.schedule.unroll_length

    def add_seed_axis(tree):
        return jax.tree.map(lambda x: jnp.asarray(x)[None], tree)

    first_state = jax.jit(
        jax.vmap(
            lambda raw, key: initial_state(agent, replay, pipeline, env.num_envs, None, raw, key)
        )
    )

    def init(keys):
        env_key, key = jax.random.split(keys[0])
        _, raw = env.reset(env_key)
        return first_state(add_seed_axis(raw), key[None])

    def act_one(agent_state, raw, observations, carry, stats, key):
        key, act_key = jax.random.split(key)
        step, observations, carry, stats = observe_and_act(
            agent, pipeline, agent_state, raw, observations, carry, stats, act_key
        )
        return step, observations, carry, stats, key

    act_step = jax.jit(jax.vmap(act_one))

    @jax.jit
    def finish(state: TrainState, steps, observations, carry, stats, key):
        steps = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *steps)  # [K, T, B]

        def finish_one(state, steps, observations, carry, stats, key):
            key, learn_key = jax.random.split(key)
            return learn_from_unroll(
                agent,
                replay,
                state,
                steps,
                key,
                learn_key,
                observations=observations,
                carry=carry,
                stats=stats,
            )

        return jax.vmap(finish_one, axis_name=SEED_AXIS)(
            state, steps, observations, carry, stats, key
        )

    def iteration(state: TrainState):
        observations, carry, stats, key = state.observations, state.carry, state.stats, state.key
        action = jax.device_get(state.pending.action[0])
        steps = []
        for _ in range(unroll_length):
            _, raw = env.step(None, action)
            step, observations, carry, stats, key = act_step(
                state.agent_state, add_seed_axis(raw), observations, carry, stats, key
            )
            action = jax.device_get(step.action[0])
            steps.append(step)
        return finish(state, steps, observations, carry, stats, key)

    @jax.jit
    def act_first(state: TrainState, raw, key):
        def one(state, raw, key):
            observations = pipeline.with_history_for(state.observations, env.num_envs)
            episodes = EpisodeStats.zeros(env.num_envs)
            stats = state.stats._replace(
                episode_return=episodes.episode_return, episode_length=episodes.episode_length
            )
            pending, observations, carry, stats = observe_and_act(
                agent,
                pipeline,
                state.agent_state,
                raw,
                observations,
                agent.initial_carry(env.num_envs),
                stats,
                key,
            )
            return state._replace(
                pending=pending, observations=observations, carry=carry, stats=stats
            )

        return jax.vmap(one)(state, raw, key)

    def restart(state: TrainState, key) -> TrainState:
        """Fresh episodes: Gymnasium environment state cannot be saved in a checkpoint."""
        env_key, act_key = jax.random.split(key)
        _, raw = env.reset(env_key)
        return act_first(state, add_seed_axis(raw), act_key[None])

    host_evaluate = make_host_evaluate(agent, eval_env, temperatures, pipeline)

    def evaluate(state: TrainState, keys):
        unbatched = jax.tree.map(lambda x: x[0], (state.agent_state, state.observations))
        return host_evaluate(*unbatched, keys[0])[None]

    return Program(
        init=init,
        iteration=iteration,
        evaluate=evaluate,
        restart=restart,
        compiled_sizes=_cache_sizes(act_step, finish),
    )


def data_parallel(agent: Agent, devices) -> Agent:
    """The agent with its updates split over ``devices`` by sequence (gradients averaged
    across them); unchanged on one device."""
    if len(devices) <= 1:
        return agent
    size, field = agent.schedule.mini_batch_size, agent.schedule.mini_batch_size_field
    if size % len(devices):
        raise ConfigError(
            f"{field} gives {size} sequences per update, which {len(devices)} devices cannot "
            f"share evenly: choose a multiple of {len(devices)}"
        )
    return dataclasses.replace(agent, update=parallel.shard_update(agent.update, devices))


def make_program(
    agent: Agent, env, eval_env, replay, temperatures, pipeline: ObservationPipeline
) -> Program:
    """The run's compiled program (``agent`` already ``data_parallel`` where wanted)."""
    make = make_jax_program if env.is_jax else make_host_program
    return make(agent, env, eval_env, replay, tuple(float(t) for t in temperatures), pipeline)
