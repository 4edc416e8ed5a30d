"""Datasets from trained policies: ``collect(run_dir, episodes, out)``.

The latest checkpoint of a run plays ``episodes`` whole episodes, each on its own
environment (so short episodes are not over-represented, as they would be if the first
episodes to end were kept), in batches of at most ``MAX_PARALLEL`` environments. Acting:

- no temperature: the training behaviour policy, ``act(mode="rollout")``; its extras (e.g.
  behaviour log-probabilities) are written into the dataset's infos;
- ``temperature=T``: ``act(mode="predict", temperature=T)`` (0 is greedy), with whatever
  extras that mode reports;
- ``epsilon=E``: each step, with probability E, a uniformly random action replaces the
  policy's. The extras then no longer describe the behaviour, so none are written.

Observations and rewards are stored raw (before the run's normalisation, history stacking
and reward scaling); actions as executed (continuous ones clipped to the bounds).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from heron import envs
from heron.offline.dataset import (
    Episode,
    check_writable,
    episodes_from_steps,
    gym_spaces,
    write_dataset,
)
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
            action, carry, extras = agent.act(agent_state, timestep, carry, act_key, "rollout")
        else:
            action, carry, extras = agent.act(
                agent_state, timestep, carry, act_key, mode="predict", temperature=temperature
            )
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
    step_env = jax.jit(env.step) if env.is_jax else env.step
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


def collect(
    run_dir: str,
    episodes: int,
    out: str,
    temperature: float | None = None,
    epsilon: float = 0.0,
    seed: int = 0,
) -> dict:
    """Rolls out the latest checkpoint of ``run_dir`` for ``episodes`` episodes and writes
    them as a Minari dataset at ``out``; returns the JSON line's fields."""
    from heron.training.evaluate_run import load_run

    if episodes <= 0:
        raise CollectError(f"episodes must be > 0, got {episodes}")
    if temperature is not None and not temperature >= 0:
        raise CollectError(f"temperature must be >= 0, got {temperature}")
    if not 0.0 <= epsilon <= 1.0:
        raise CollectError(f"epsilon must be in [0, 1], got {epsilon}")
    check_writable(out)  # before the rollouts, not after
    setup, _, state, checkpoint = load_run(run_dir)
    agent, pipeline, run = setup.agent, setup.pipeline, setup.run
    first_seed = jax.tree.map(lambda x: x[0], (state.agent_state, state.observations))
    agent_state, observations = first_seed
    policy_step = make_policy_step(agent, pipeline, temperature, epsilon)
    key = jax.random.PRNGKey(seed)
    collected: list[Episode] = []
    all_returns = []
    for batch in range(math.ceil(episodes / MAX_PARALLEL)):
        n = min(MAX_PARALLEL, episodes - batch * MAX_PARALLEL)
        env = envs.make(run.env, n, run.max_timestep)
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
    returns = np.concatenate(all_returns)
    observation_space, action_space = gym_spaces(setup.pipeline.env_spec)
    write_dataset(
        out,
        collected,
        observation_space,
        action_space,
        metadata={
            "algorithm_name": f"heron {setup.algo}",
            "heron_env": run.env,
            "heron_run_dir": os.path.abspath(run_dir),
            "heron_checkpoint": int(checkpoint),
            "heron_temperature": temperature,
            "heron_epsilon": epsilon,
            "heron_seed": seed,
        },
    )
    return {
        "out": out,
        "episodes": len(collected),
        "steps": int(sum(e.num_steps for e in collected)),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "run_dir": run_dir,
        "checkpoint": int(checkpoint),
        "env": run.env,
        "temperature": temperature,
        "epsilon": epsilon,
        "extras": sorted(collected[0].extras),
    }
