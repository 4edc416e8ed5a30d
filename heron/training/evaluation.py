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
    """(agent_state, key, temperature) -> returns [n]; compiled, stops when all episodes end."""
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

    return jax.jit(evaluate)


def make_host_evaluate(agent: Agent, eval_env):
    """The same for a Gymnasium env, stepped on the host."""

    @jax.jit
    def predict(agent_state, timestep, carry, key, temperature):
        key, act_key = jax.random.split(key)
        action, carry, _ = agent.act(
            agent_state, timestep, carry, act_key, mode="predict", temperature=temperature
        )
        return action, carry, key

    def evaluate(agent_state, key, temperature):
        reset_key, key = jax.random.split(key)
        _, timestep = eval_env.reset(reset_key)
        carry = agent.initial_carry(eval_env.num_envs)
        returns = np.zeros(eval_env.num_envs, np.float64)
        alive = np.ones(eval_env.num_envs, bool)
        while alive.any():
            action, carry, key = predict(agent_state, timestep, carry, key, temperature)
            _, timestep = eval_env.step(None, jax.device_get(action))
            returns += np.where(alive, timestep.reward, 0.0)
            alive &= timestep.step_type != StepType.LAST
        return returns

    return evaluate


def make_evaluate(agent: Agent, eval_env):
    evaluate = (make_jax_evaluate if eval_env.is_jax else make_host_evaluate)(agent, eval_env)

    def run(agent_state, key, temperatures) -> list[EvalResult]:
        results = []
        keys = jax.random.split(key, len(temperatures))
        for temperature, temp_key in zip(temperatures, keys, strict=True):
            returns = evaluate(agent_state, temp_key, jnp.float32(temperature))
            results.append(EvalResult(float(temperature), np.asarray(returns)))
        return results

    return run
