"""Evaluation: ``n_evals`` episodes on a separate environment at a given temperature.

Each evaluation env plays exactly one episode (to its LAST step); temperature 0 is greedy.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron.agents.base import Agent
from heron.types import StepType


class EvalResult(NamedTuple):
    temperature: float
    returns: np.ndarray  # [n_evals]

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


def make_jax_evaluate(agent: Agent, eval_env):
    """(agent_state, keys [K], temperatures [K]) -> returns [K, n]: every temperature's
    episodes in one compiled loop that stops when all episodes have ended."""
    max_steps = eval_env.spec.max_episode_steps

    def evaluate(agent_state, key, temperature):
        reset_key, key = jax.random.split(key)
        env_state, timestep = eval_env.reset(reset_key)
        carry = agent.initial_carry(eval_env.num_envs)
        returns = jnp.zeros(eval_env.num_envs, jnp.float32)
        alive = jnp.ones(eval_env.num_envs, bool)

        def cond(loop):
            return jnp.any(loop[4]) & (loop[6] <= max_steps)

        def body(loop):
            env_state, timestep, carry, returns, alive, key, t = loop
            key, act_key, env_key = jax.random.split(key, 3)
            action, carry, _ = agent.act(
                agent_state, timestep, carry, act_key, mode="predict", temperature=temperature
            )
            env_state, timestep = eval_env.step(env_state, action, env_key)
            returns = returns + jnp.where(alive, timestep.reward, 0.0)
            alive = alive & ~timestep.is_last()
            return env_state, timestep, carry, returns, alive, key, t + 1

        loop = (env_state, timestep, carry, returns, alive, key, jnp.zeros((), jnp.int32))
        return jax.lax.while_loop(cond, body, loop)[3]

    return jax.jit(jax.vmap(evaluate, in_axes=(None, 0, 0)))


def make_host_evaluate(agent: Agent, eval_env, n_temperatures: int):
    """The same for a Gymnasium env stepped on the host: one vector env of K x n envs, the
    k-th group of n acting at the k-th temperature."""
    n = eval_env.num_envs
    group_env = eval_env.with_num_envs(n * n_temperatures)

    def act_group(agent_state, timestep, carry, key, temperature):
        action, carry, _ = agent.act(
            agent_state, timestep, carry, key, mode="predict", temperature=temperature
        )
        return action, carry

    @jax.jit
    def predict(agent_state, timestep, carry, keys, temperatures):
        grouped = jax.tree.map(lambda x: x.reshape((n_temperatures, n) + x.shape[1:]), timestep)
        split = jax.vmap(jax.random.split)(keys)
        action, carry = jax.vmap(act_group, in_axes=(None, 0, 0, 0, 0))(
            agent_state, grouped, carry, split[:, 1], temperatures
        )
        return action.reshape((n_temperatures * n,) + action.shape[2:]), carry, split[:, 0]

    def evaluate(agent_state, keys, temperatures):
        _, timestep = group_env.reset(keys[0])
        carry = jax.vmap(lambda _: agent.initial_carry(n))(jnp.arange(n_temperatures))
        returns = np.zeros(n * n_temperatures, np.float64)
        alive = np.ones(n * n_temperatures, bool)
        while alive.any():
            action, carry, keys = predict(agent_state, timestep, carry, keys, temperatures)
            _, timestep = group_env.step(None, jax.device_get(action))
            returns += np.where(alive, timestep.reward, 0.0)
            alive &= timestep.step_type != StepType.LAST
        return returns.reshape(n_temperatures, n)

    return evaluate


def make_evaluate(agent: Agent, eval_env, temperatures) -> callable:
    """(agent_state, key) -> one EvalResult per temperature (``eval_env.num_envs`` episodes)."""
    temperatures = tuple(float(t) for t in temperatures)
    if eval_env.is_jax:
        evaluate = make_jax_evaluate(agent, eval_env)
    else:
        evaluate = make_host_evaluate(agent, eval_env, len(temperatures))

    def run(agent_state, key) -> list[EvalResult]:
        keys = jax.random.split(key, len(temperatures))
        returns = np.asarray(evaluate(agent_state, keys, jnp.asarray(temperatures, jnp.float32)))
        return [EvalResult(t, r) for t, r in zip(temperatures, returns, strict=True)]

    return run
