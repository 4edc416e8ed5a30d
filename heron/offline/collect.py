"""Datasets from trained policies: ``collect_episodes`` (``heron.api.collect`` reads a run
directory and writes the dataset).

A trained policy plays ``episodes`` whole episodes, each on its own
environment (so short episodes are not over-represented, as they would be if the first
episodes to end were kept), in batches of at most ``MAX_PARALLEL`` environments. Acting:

- no temperature: the training behaviour policy, ``act``; its array extras (e.g. behaviour
  log-probabilities) are written into the dataset's infos;
- ``temperature=T``: ``policy(..., temperature=T)`` (0 is greedy), which reports no extras;
- ``epsilon=E``: each step, with probability E, a uniformly random action replaces the
  policy's. The extras then no longer describe the behaviour, so none are written.

Observations and rewards are stored raw (before the run's normalisation, history stacking
and reward scaling); actions as executed (continuous ones clipped to the bounds).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from heron.offline.dataset import Episode, episodes_from_steps
from heron.specs import ActionSpec
from heron.types import Experience, StepType

MAX_PARALLEL = 256  # environments stepped together


class CollectError(ValueError):
    """A collection request heron cannot serve."""


def random_actions(spec: ActionSpec, key, batch: int):
    """Uniform actions [batch, ...] of the action space."""
    if spec.is_discrete:
        return jax.random.randint(key, (batch,) + spec.action_shape, 0, spec.n_actions, jnp.int32)
    low, high = spec.bounds
    return jax.random.uniform(key, (batch,) + spec.shape, jnp.float32, low, high)


def make_policy_step(agent, pipeline, temperature: float | None, epsilon: float):
    """(agent_state, pipeline state, raw TimeStep [B], carry, key) -> (action [B], extras,
    pipeline state, carry): the run's policy with its frozen observation pipeline."""
    spec = agent.spec.action

    def policy_step(agent_state, observations, raw, carry, key):
        act_key, coin_key, random_key = jax.random.split(key, 3)
        observations, timestep = pipeline.apply(observations, raw, update_stats=False)
        if temperature is None:
            action, carry, extras = agent.act(agent_state, timestep, carry, act_key)
        else:
            action, carry = agent.policy(agent_state, timestep, carry, act_key, temperature)
            extras = {}
        if epsilon > 0:
            batch = raw.step_type.shape[0]
            explore = jax.random.uniform(coin_key, (batch,)) < epsilon
            explore = explore.reshape((batch,) + (1,) * (action.ndim - 1))
            action = jnp.where(explore, random_actions(spec, random_key, batch), action)
            extras = {}
        if not spec.is_discrete:
            action = jnp.clip(action, *spec.bounds)
        # Array extras only (e.g. log_prob [B]); they become the dataset's per-step infos.
        extras = (
            {k: v for k, v in extras.items() if hasattr(v, "shape")}
            if isinstance(extras, dict)
            else {}
        )
        return action.astype(spec.dtype), extras, observations, carry

    return policy_step


def rollout_episodes(env, agent, pipeline, agent_state, observations, policy_step, key):
    """Every env of ``env`` plays one episode; returns (episodes, returns [B] float64)."""
    n = env.num_envs
    step_policy = jax.jit(policy_step)
    step_env = jax.jit(env.step)
    reset_key, key = jax.random.split(key)
    env_state, raw = env.reset(reset_key)
    observations = pipeline.with_history_for(observations, n)
    carry = agent.initial_carry(n)
    alive = np.ones(n, bool)
    returns = np.zeros(n, np.float64)

    def act_and_record(raw, observations, carry, key):
        action, extras, observations, carry = step_policy(
            agent_state, observations, raw, carry, key
        )
        records.append(jax.device_get(Experience.from_timestep(raw, action, extras)))
        return action, observations, carry

    records: list[Experience] = []
    key, act_key = jax.random.split(key)
    action, observations, carry = act_and_record(raw, observations, carry, act_key)
    while alive.any():
        key, act_key, env_key = jax.random.split(key, 3)
        env_state, raw = step_env(env_state, action, env_key)
        reward, step_type = jax.device_get((raw.reward, raw.step_type))
        returns += np.where(alive, reward, 0.0)
        alive &= step_type != StepType.LAST
        action, observations, carry = act_and_record(raw, observations, carry, act_key)
    steps = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *records)  # [B, T, ...]
    episodes = []
    for i in range(n):
        lane = jax.tree.map(lambda x, i=i: x[i], steps)
        last = int(np.argmax(lane.step_type[1:] == StepType.LAST)) + 1
        whole = jax.tree.map(lambda x, last=last: x[: last + 1], lane)
        episodes.extend(episodes_from_steps(whole))
    return episodes, returns


def collect_episodes(
    make_env,
    agent,
    pipeline,
    agent_state,
    observations,
    episodes: int,
    policy_step,
    key,
    stop=lambda: False,
):
    """``episodes`` whole episodes of ``policy_step`` on environments from ``make_env(n)``,
    at most ``MAX_PARALLEL`` at a time (fewer once ``stop()`` holds between two batches);
    returns (episodes, returns [episodes] float64)."""
    collected: list[Episode] = []
    all_returns = [np.zeros(0)]
    for batch in range(math.ceil(episodes / MAX_PARALLEL)):
        if stop():
            break
        n = min(MAX_PARALLEL, episodes - batch * MAX_PARALLEL)
        env = make_env(n)
        batch_episodes, returns = rollout_episodes(
            env,
            agent,
            pipeline,
            agent_state,
            observations,
            policy_step,
            jax.random.fold_in(key, batch),
        )
        collected.extend(batch_episodes)
        all_returns.append(returns)
        if hasattr(env, "close"):
            env.close()
    return collected, np.concatenate(all_returns)
