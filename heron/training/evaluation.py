"""Evaluation: ``n`` episodes at each of several temperatures, in one compiled loop; or,
for a model without a policy, its score on held-out data.

One evaluation environment of ``n x len(temperatures)`` sub-environments plays exactly one
episode each (to its LAST step); the k-th group of ``n`` acts at the k-th temperature
(0 is greedy). The same code serves JAX and Gymnasium environments (the latter stepped
through host callbacks). Normalisation statistics are used as they are, not updated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from heron import parallel
from heron.agents.base import Agent
from heron.envs.wrappers import ObservationPipeline, PipelineState
from heron.types import StepType


class Evaluation(NamedTuple):
    """How a run is evaluated: ``run(agent_state, observation pipeline state, key) ->
    results`` (arrays, compiled into the run's program) and ``lines(results of one seed,
    as numpy) -> [fields of an evaluation line]``, one line per temperature in
    ``temperatures`` (temperature, return_mean, return_std, episodes, and any more)."""

    run: Callable
    temperatures: tuple[float, ...]
    lines: Callable[[Any], list[dict]]


def episode_lines(temperatures) -> Callable[[Any], list[dict]]:
    """returns [n_temperatures, n] -> one line per temperature."""

    def lines(returns) -> list[dict]:
        return [
            {
                "temperature": float(temperature),
                "return_mean": float(np.mean(r)),
                "return_std": float(np.std(r)),
                "episodes": int(np.size(r)),
            }
            for temperature, r in zip(temperatures, returns, strict=True)
        ]

    return lines


def make_evaluate(
    agent: Agent, eval_env, temperatures, pipeline: ObservationPipeline, axis_name=None
) -> Evaluation:
    """The evaluation whose results are returns [n_temperatures, n]; ``eval_env`` has
    n x n_temperatures sub-environments. Under ``vmap`` over runs with
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
            return going if axis_name is None else parallel.same_for_all_seeds(going)

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

    at = tuple(float(t) for t in temperatures)
    return Evaluation(evaluate, at, episode_lines(at))


def make_scoring(agent: Agent, held_out, pipeline: ObservationPipeline) -> Evaluation:
    """A model's evaluation: ``agent.scoring.score`` of the held-out steps [N] (as the
    replay keeps them, normalised as its samples are), one line at temperature 0 whose
    ``return_mean`` is the score's headline metric, the others beside it as
    ``eval/<name>``."""
    scoring = agent.scoring
    episodes = int(np.sum(np.asarray(held_out.step_type) == StepType.FIRST))

    def run(agent_state, observations: PipelineState, key):
        del key  # the score is of all the held-out steps
        return scoring.score(agent_state, pipeline.view(observations)(held_out))

    def lines(metrics) -> list[dict]:
        return [
            {
                "temperature": 0.0,
                "return_mean": float(metrics[scoring.headline]),
                "return_std": None,
                "episodes": episodes,
                "quantity": scoring.quantity,
                **{f"eval/{name}": float(value) for name, value in metrics.items()},
            }
        ]

    return Evaluation(run, (0.0,), lines)
