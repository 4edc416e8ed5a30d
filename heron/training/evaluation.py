"""Evaluation: ``n`` episodes at each of several temperatures, in one compiled loop.

One evaluation environment of ``n x len(temperatures)`` sub-environments plays exactly one
episode each (to its LAST step); the k-th group of ``n`` acts at the k-th temperature
(0 is greedy). The same code serves JAX and Gymnasium environments (the latter stepped
through host callbacks). Normalisation statistics are used as they are, not updated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from heron.agents.base import Agent
from heron.envs.wrappers import ObservationPipeline


def make_evaluate(
    agent: Agent, eval_env, temperatures, pipeline: ObservationPipeline, axis_name=None
):
    """(agent_state, observation pipeline state, key) -> returns [n_temperatures, n];
    ``eval_env`` has n x n_temperatures sub-environments. Under ``vmap`` over runs with
    ``axis_name``, every run steps until all runs' episodes have ended (a loop whose
    condition is the same for all runs may step host environments)."""
    temperatures = jnp.asarray(tuple(float(t) for t in temperatures), jnp.float32)
    groups = temperatures.shape[0]
    total = eval_env.num_envs
    if total % groups:
        raise ValueError(f"{total} evaluation environments cannot be split into {groups} groups")
    n = total // groups
    max_steps = eval_env.spec.max_episode_steps or 2**30

    def grouped(tree):  # [groups x n, ...] -> [groups, n, ...]
        return jax.tree.map(lambda x: x.reshape((groups, n) + x.shape[1:]), tree)

    def ungrouped(tree):
        return jax.tree.map(lambda x: x.reshape((groups * n,) + x.shape[2:]), tree)

    def act(agent_state, timestep, carry, key):
        keys = jax.random.split(key, groups)
        action, carry = jax.vmap(agent.policy, in_axes=(None, 0, 0, 0, 0))(
            agent_state, grouped(timestep), carry, keys, temperatures
        )
        return ungrouped(action), carry

    def evaluate(agent_state, observations, key):
        reset_key, key = jax.random.split(key)
        env_state, raw = eval_env.reset(reset_key)
        observations = pipeline.with_history_for(observations, total)
        observations, timestep = pipeline.apply(observations, raw, update_stats=False)
        carry = jax.vmap(lambda _: agent.initial_carry(n))(jnp.arange(groups))
        returns = jnp.zeros(total, jnp.float32)
        alive = jnp.ones(total, bool)

        def more(loop):
            going = jnp.any(loop[5]) & (loop[7] <= max_steps)
            return going if axis_name is None else jax.lax.pmax(going, axis_name)

        def one(loop):
            env_state, observations, timestep, carry, returns, alive, key, t = loop
            key, act_key, env_key = jax.random.split(key, 3)
            action, carry = act(agent_state, timestep, carry, act_key)
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
        return jax.lax.while_loop(more, one, loop)[4].reshape(groups, n)

    return evaluate
