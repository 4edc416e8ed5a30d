"""The training driver: one loop for every agent and both kinds of environment.

    summary = train("ppo", PPOConfig(), RunConfig(env="gymnax:CartPole-v1"))

Each iteration collects ``unroll_length`` steps from ``num_envs`` environments, replays them
and runs the agent's mini-batch updates (see ``loop.py``); evaluation, logging and
checkpoints follow on their schedules. Everything a user can get wrong is checked before
the run directory is touched.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import time
from typing import Any

import jax
import numpy as np

from heron import agents, envs
from heron.agents.base import ConfigError
from heron.replay import make_replay
from heron.training import checkpoints
from heron.training.config import RunConfig
from heron.training.evaluation import make_evaluate
from heron.training.logging import RunLogger
from heron.training.loop import init_train_state, make_host_iteration, make_jax_iteration


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); the last good checkpoint is kept."""


def params_digest(params) -> str:
    """sha256 of the parameters' bytes in tree order: equal digests, bit-equal parameters."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(params)):
        leaf = np.ascontiguousarray(leaf)
        digest.update(str((leaf.shape, leaf.dtype.str)).encode())
        digest.update(leaf.tobytes())
    return digest.hexdigest()


@dataclasses.dataclass
class Setup:
    """Validated pieces of a run, built before anything is written."""

    algo: str
    agent_config: Any
    run: RunConfig
    env: Any
    eval_env: Any
    agent: agents.Agent
    replay: Any
    iterations: int

    @property
    def steps_per_iteration(self) -> int:
        return self.agent.schedule.unroll_length * self.run.num_envs


def _check_schedule(agent: agents.Agent, num_envs: int) -> None:
    schedule = agent.schedule
    batch_steps = schedule.unroll_length * num_envs
    if batch_steps % schedule.mini_batch_length:
        raise ConfigError(
            f"mini_batch_length {schedule.mini_batch_length} must divide the batch of "
            f"{batch_steps} steps"
        )
    sequences = batch_steps // schedule.mini_batch_length
    if sequences % schedule.mini_batch_size:
        divisors = [d for d in (32, 64, 128, 256, 512, 1024) if sequences % d == 0]
        raise ConfigError(
            f"{schedule.mini_batch_size_field}={schedule.mini_batch_size} must divide the batch "
            f"of num_envs x unroll_length = {num_envs} x {schedule.unroll_length} = "
            f"{batch_steps} steps"
            + (f" (e.g. {', '.join(map(str, divisors))})" if divisors else "")
        )


def build(algo: str, agent_config, run: RunConfig) -> Setup:
    """Validates and builds a run: environments, agent, replay. Writes nothing."""
    agents.config_class(algo)  # unknown algorithm: a clear error first
    env = envs.make(run.env, run.num_envs, run.max_timestep)
    eval_env = envs.make(run.env, run.n_evals, run.max_timestep_eval)
    agent = agents.make(algo, env.spec, agent_config)
    _check_schedule(agent, run.num_envs)
    replay = make_replay(agent.schedule.replay)
    steps_per_iteration = agent.schedule.unroll_length * run.num_envs
    iterations = max(1, math.ceil(run.steps / steps_per_iteration))
    return Setup(algo, agent_config, run, env, eval_env, agent, replay, iterations)


def default_run_dir(algo: str, env_id: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{algo}_{env_id.replace(':', '-')}_{stamp}")


def prepare_run_dir(run_dir: str) -> None:
    if os.path.exists(run_dir) and os.listdir(run_dir):
        raise ConfigError(
            f"run dir {run_dir!r} already exists and is not empty; choose another --run-dir "
            "(or remove it)"
        )
    os.makedirs(run_dir, exist_ok=True)


def config_record(setup: Setup) -> dict:
    return {
        "algo": setup.algo,
        "run": dataclasses.asdict(setup.run),
        setup.algo: dataclasses.asdict(setup.agent_config),
        "heron_version": _version(),
    }


def _version() -> str:
    from heron import __version__

    return __version__


def _finite_or_raise(metrics: dict, step: int, run_dir: str) -> None:
    bad = [k for k, v in metrics.items() if not np.all(np.isfinite(v))]
    if bad:
        raise TrainingError(
            f"non-finite {', '.join(bad)} at step {step}; training stopped, the last good "
            f"checkpoint in {os.path.join(run_dir, 'checkpoints')!r} is kept"
        )


def train(setup: Setup, run_dir: str) -> dict:
    """Runs a validated setup to its configured steps; returns the summary (final JSON line)."""
    start = time.monotonic()
    run = setup.run
    prepare_run_dir(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config_record(setup), f, indent=2)

    agent, env = setup.agent, setup.env
    state = init_train_state(agent, env, setup.replay, jax.random.PRNGKey(run.seed))
    if env.is_jax:
        iteration = jax.jit(make_jax_iteration(agent, env, setup.replay), donate_argnums=0)
    else:
        iteration = make_host_iteration(agent, env, setup.replay)
    evaluate = make_evaluate(agent, setup.eval_env, run.eval_temperatures)
    eval_key = jax.random.fold_in(jax.random.PRNGKey(run.seed), 1)
    checkpointer = checkpoints.Checkpointer(run_dir, run.keep_checkpoints)
    logger = RunLogger(run_dir, setup.iterations * setup.steps_per_iteration)
    greedy = min(run.eval_temperatures)
    evals: list[float] = []
    train_time, timed_steps = 0.0, 0
    previous = (0, 0.0)  # completed episodes and their return sum at the last log
    try:
        for i in range(setup.iterations):
            tick = time.monotonic()
            state, metrics = iteration(state)
            metrics = jax.device_get(metrics)
            stats, steps = jax.device_get((state.stats, state.env_steps))
            steps = int(steps)
            if i > 0:  # the first iteration includes compilation
                train_time += time.monotonic() - tick
                timed_steps += setup.steps_per_iteration
            _finite_or_raise(metrics, steps, run_dir)
            episodes = int(stats.completed) - previous[0]
            latest = (float(stats.return_sum) - previous[1]) / episodes if episodes else math.nan
            previous = (int(stats.completed), float(stats.return_sum))
            wall = time.monotonic() - start
            logger.write(
                {
                    "kind": "train",
                    "step": steps,
                    "wall_s": wall,
                    "seed": run.seed,
                    "iteration": i + 1,
                    "return_mean": latest,
                    "episodes": episodes,
                    **{k: float(v) for k, v in metrics.items()},
                }
            )
            last = i + 1 == setup.iterations
            if (i + 1) % run.eval_every_n == 0 or last:
                results = evaluate(state.agent_state, jax.random.fold_in(eval_key, i))
                for result in results:
                    logger.write(
                        {
                            "kind": "eval",
                            "step": steps,
                            "wall_s": time.monotonic() - start,
                            "seed": run.seed,
                            "temperature": result.temperature,
                            "return_mean": result.mean,
                            "return_std": result.std,
                            "episodes": len(result.returns),
                        }
                    )
                evals.append(next(r.mean for r in results if r.temperature == greedy))
            if (i + 1) % run.save_every_n == 0 or last:
                checkpointer.save(i + 1, state)
            speed = timed_steps / train_time if train_time else steps / (time.monotonic() - start)
            logger.progress(steps, speed, latest, evals[-1] if evals else None)
    finally:
        logger.close()
        checkpointer.close()
    wall = time.monotonic() - start
    steps = int(state.env_steps)
    return {
        "run_dir": run_dir,
        "steps": steps,
        "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 1),
        "steps_per_s_after_compile": round(timed_steps / train_time, 1) if train_time else None,
        "final_eval_return": evals[-1],
        "best_eval_return": max(evals),
        "params_digest": params_digest(agent.params(state.agent_state)),
    }
