"""Evaluation: ``n_evals`` episodes on a separate environment at a given temperature.

Each evaluation env plays exactly one episode (to its LAST step); temperature 0 is greedy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from heron.agents.base import Agent
from heron.envs.wrappers import ObservationPipeline
from heron.types import StepType


def make_jax_evaluate(agent: Agent, eval_env, temperatures, pipeline: ObservationPipeline):
    """(agent_state, observation pipeline state, key) -> returns [n_temperatures, n]: every
    temperature's episodes in one pure loop (vmapped over temperatures) that stops when all
    episodes have ended. Normalisation statistics are used as they are, not updated."""
    max_steps = eval_env.spec.max_episode_steps
    temperatures = jnp.asarray(temperatures, jnp.float32)

    def evaluate(agent_state, observations, key, temperature):
        reset_key, key = jax.random.split(key)
        env_state, raw = eval_env.reset(reset_key)
        observations = pipeline.with_history_for(observations, eval_env.num_envs)
        observations, timestep = pipeline.apply(observations, raw, update_stats=False)
        carry = agent.initial_carry(eval_env.num_envs)
        returns = jnp.zeros(eval_env.num_envs, jnp.float32)
        alive = jnp.ones(eval_env.num_envs, bool)

        def cond(loop):
            return jnp.any(loop[5]) & (loop[7] <= max_steps)

        def body(loop):
            env_state, observations, timestep, carry, returns, alive, key, t = loop
            key, act_key, env_key = jax.random.split(key, 3)
            action, carry, _ = agent.act(
                agent_state, timestep, carry, act_key, mode="predict", temperature=temperature
            )
            env_state, raw = eval_env.step(env_state, action, env_key)
            observations, timestep = pipeline.apply(observations, raw, update_stats=False)
            returns = returns + jnp.where(alive, raw.reward, 0.0)
            alive = alive & ~raw.is_last()
            return env_state, observations, timestep, carry, returns, alive, key, t + 1

        loop = (
            env_state,
            observations,
            timestep,
            carry,
            returns,
            alive,
            key,
            jnp.zeros((), jnp.int32),
        )
        return jax.lax.while_loop(cond, body, loop)[4]

    def evaluate_all(agent_state, observations, key):
        keys = jax.random.split(key, temperatures.shape[0])
        return jax.vmap(evaluate, in_axes=(None, None, 0, 0))(
            agent_state, observations, keys, temperatures
        )

    return evaluate_all


def make_host_evaluate(agent: Agent, eval_env, temperatures, pipeline: ObservationPipeline):
    """The same for a Gymnasium env stepped on the host: one vector env of K x n envs, the
    k-th group of n acting at the k-th temperature. Returns a NumPy array [K, n]."""
    n_temperatures = len(temperatures)
    temperatures = jnp.asarray(temperatures, jnp.float32)
    n = eval_env.num_envs
    group_env = eval_env.with_num_envs(n * n_temperatures)

    def act_group(agent_state, timestep, carry, key, temperature):
        action, carry, _ = agent.act(
            agent_state, timestep, carry, key, mode="predict", temperature=temperature
        )
        return action, carry

    @jax.jit
    def predict(agent_state, observations, raw, carry, keys):
        observations, timestep = pipeline.apply(observations, raw, update_stats=False)
        grouped = jax.tree.map(lambda x: x.reshape((n_temperatures, n) + x.shape[1:]), timestep)
        split = jax.vmap(jax.random.split)(keys)
        action, carry = jax.vmap(act_group, in_axes=(None, 0, 0, 0, 0))(
            agent_state, grouped, carry, split[:, 1], temperatures
        )
        action = action.reshape((n_temperatures * n,) + action.shape[2:])
        return action, observations, carry, split[:, 0]

    def evaluate(agent_state, observations, key):
        reset_key, key = jax.random.split(key)
        _, raw = group_env.reset(reset_key)
        observations = pipeline.with_history_for(observations, n * n_temperatures)
        keys = jax.random.split(key, n_temperatures)
        carry = jax.vmap(lambda _: agent.initial_carry(n))(jnp.arange(n_temperatures))
        returns = np.zeros(n * n_temperatures, np.float64)
        alive = np.ones(n * n_temperatures, bool)
        while alive.any():
            action, observations, carry, keys = predict(agent_state, observations, raw, carry, keys)
            _, raw = group_env.step(None, jax.device_get(action))
            returns += np.where(alive, raw.reward, 0.0)
            alive &= raw.step_type != StepType.LAST
        return returns.reshape(n_temperatures, n)

    return evaluate
