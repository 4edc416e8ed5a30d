"""The training driver: one loop for every agent and both kinds of environment.

    setup = build("ppo", PPOConfig(), RunConfig(env="gymnax:CartPole-v1"))
    summary = train(setup, "runs/cartpole")       # the final JSON line's fields
    summary = resume("runs/cartpole")             # continue from the latest checkpoint

Each iteration collects ``unroll_length`` steps from ``num_envs`` environments, replays them
and runs the agent's mini-batch updates (see ``loop.py``); evaluation, logging and
checkpoints follow on their schedules. ``seeds`` independent runs share one compiled
program. Everything a user can get wrong is checked before the run directory is touched.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import sys
import time
import warnings
from typing import Any

import jax
import numpy as np

from heron import agents, envs
from heron.agents.base import ConfigError
from heron.envs.wrappers import ObservationPipeline
from heron.replay import make_replay
from heron.training import checkpoints
from heron.training.config import RunConfig
from heron.training.logging import RunLogger
from heron.training.loop import Program, TrainState, data_parallel, make_program


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
    pipeline: ObservationPipeline
    iterations: int
    offline: Any = None  # heron.offline.OfflineData when training from a dataset

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration (offline: gradient updates)."""
        if self.offline is not None:
            return self.run.updates_per_iteration
        return self.agent.schedule.unroll_length * self.run.num_envs

    @property
    def seeds(self) -> list[int]:
        return [self.run.seed + k for k in range(self.run.seeds)]

    def program(self) -> Program:
        if self.offline is not None:
            from heron.offline.training import make_offline_program

            return make_offline_program(
                self.agent,
                self.eval_env,
                tuple(float(t) for t in self.run.eval_temperatures),
                self.pipeline,
                self.offline,
                self.run.updates_per_iteration,
            )
        return make_program(
            self.agent,
            self.env,
            self.eval_env,
            self.replay,
            self.run.eval_temperatures,
            self.pipeline,
        )


def _check_schedule(agent: agents.Agent, num_envs: int) -> None:
    """ALF's rules for training on sequences, and mini-batches that tile the batch."""
    schedule = agent.schedule
    name = agent.name
    if schedule.recurrent and not schedule.use_rollout_state:
        if schedule.mini_batch_length == 1:
            raise ConfigError(
                f"a recurrent {name} trained on sequences of length 1 never uses its memory: "
                f"set {name}.use_rollout_state True (train from the recorded state) or "
                f"{name}.mini_batch_length > 1"
            )
        _warn_once(
            f"heron: a recurrent {name} trains each sequence from a zero state; consider "
            f"{name}.use_rollout_state True to start from the state recorded when acting"
        )
    if schedule.replay != "one_time":
        return  # sequences are sampled from the replay, not cut from the collected batch
    if schedule.unroll_length % schedule.mini_batch_length:
        raise ConfigError(
            f"{name}.unroll_length={schedule.unroll_length} is not a multiple of "
            f"{name}.mini_batch_length={schedule.mini_batch_length}: training sequences must "
            "not cross from one environment's unroll into another's"
        )
    batch_steps = schedule.unroll_length * num_envs
    sequences = batch_steps // schedule.mini_batch_length
    if sequences % schedule.mini_batch_size:
        divisors = [d for d in (32, 64, 128, 256, 512, 1024) if sequences % d == 0]
        hint = f" (e.g. {', '.join(map(str, divisors))})" if divisors else ""
        raise ConfigError(
            f"{schedule.mini_batch_size_field}={schedule.mini_batch_size} must divide the batch "
            f"of num_envs x unroll_length = {num_envs} x {schedule.unroll_length} = "
            f"{batch_steps} steps{hint}"
        )


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def build(algo: str, agent_config, run: RunConfig) -> Setup:
    """Validates and builds a run: environments, agent, replay (with ``run.dataset``: the
    replay filled from the dataset, checked against the env). Writes nothing."""
    agents.config_class(algo)  # unknown algorithm: a clear error first
    if run.dataset is not None:
        return _build_offline(algo, agent_config, run)
    env = envs.make(run.env, run.num_envs, run.max_timestep)
    if run.seeds > 1 and not env.is_jax:
        raise ConfigError(
            f"seeds={run.seeds} needs a JAX environment (gymnax:<id> or heron:<id>) to vmap "
            f"the runs into one program; {run.env!r} steps on the host: use seeds=1"
        )
    eval_env = envs.make(run.env, run.n_evals, run.max_timestep_eval)
    pipeline = ObservationPipeline(
        env.spec, run.normalize_observations, run.len_history_for_policy, run.reward_scale
    )
    agent = _resolve_replay_ratio(agents.make(algo, pipeline.spec, agent_config), run.num_envs)
    _check_schedule(agent, run.num_envs)
    agent = data_parallel(agent, jax.devices())  # several devices: the learner is split
    replay = _make_replay(agent.schedule, run.num_envs)
    steps_per_iteration = agent.schedule.unroll_length * run.num_envs
    iterations = max(1, math.ceil(run.steps / steps_per_iteration))
    return Setup(algo, agent_config, run, env, eval_env, agent, replay, pipeline, iterations)


def _build_offline(algo: str, agent_config, run: RunConfig) -> Setup:
    """An offline run: no training environments; the dataset fills the replay once."""
    from heron.offline.dataset import read_dataset
    from heron.offline.training import check_offline_run, load_offline_data

    eval_env = envs.make(run.env, run.n_evals, run.max_timestep_eval)
    if run.seeds > 1 and not eval_env.is_jax:
        raise ConfigError(
            f"seeds={run.seeds} needs a JAX environment (gymnax:<id> or heron:<id>) to "
            f"evaluate the runs in one program; {run.env!r} steps on the host: use seeds=1"
        )
    pipeline = ObservationPipeline(
        eval_env.spec, run.normalize_observations, run.len_history_for_policy, run.reward_scale
    )
    agent = data_parallel(agents.make(algo, pipeline.spec, agent_config), jax.devices())
    check_offline_run(agent, run)
    data = load_offline_data(read_dataset(run.dataset), agent, pipeline, run.env)
    iterations = max(1, math.ceil(run.steps / run.updates_per_iteration))
    return Setup(
        algo,
        agent_config,
        run,
        eval_env,
        eval_env,
        agent,
        data.replay,
        pipeline,
        iterations,
        offline=data,
    )


def _resolve_replay_ratio(agent: agents.Agent, num_envs: int) -> agents.Agent:
    """Off-policy agents may ask for a replay ratio: updates per collected env step."""
    schedule = agent.schedule
    if schedule.replay_ratio is None:
        return agent
    steps = schedule.unroll_length * num_envs
    num_updates = max(1, round(schedule.replay_ratio * steps))
    return dataclasses.replace(
        agent, schedule=dataclasses.replace(schedule, num_updates=num_updates)
    )


def _make_replay(schedule, num_envs: int):
    if schedule.replay == "one_time":
        return make_replay("one_time")
    return make_replay(schedule.replay, capacity=schedule.replay_capacity, num_envs=num_envs)


def default_run_dir(algo: str, env_id: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{algo}_{env_id.replace(':', '-')}_{stamp}")


def config_record(setup: Setup) -> dict:
    from heron import __version__

    record = {
        "algo": setup.algo,
        "run": dataclasses.asdict(setup.run),
        setup.algo: dataclasses.asdict(setup.agent_config),
        "heron_version": __version__,
    }
    if setup.offline is not None:
        record["dataset"] = setup.offline.summary
    return record


def _seed_keys(seeds: list[int], stream: int | None = None):
    keys = [jax.random.PRNGKey(seed) for seed in seeds]
    if stream is not None:
        keys = [jax.random.fold_in(key, stream) for key in keys]
    return jax.numpy.stack(keys)


class _Loop:
    """The host side of a run: schedules, logs, checkpoints and the summary."""

    def __init__(self, setup: Setup, run_dir: str, program: Program, wall_offset: float = 0.0):
        self.setup, self.run_dir, self.program = setup, run_dir, program
        run = setup.run
        self.start = time.monotonic() - wall_offset
        self.eval_keys = _seed_keys(setup.seeds, stream=1)
        self.greedy_index = int(np.argmin(run.eval_temperatures))
        self.greedy_history: list[np.ndarray] = []  # [K] greedy returns per evaluation
        self.train_time, self.timed_steps = 0.0, 0
        self.latest_return = math.nan  # mean return of the latest episodes to end
        self.checkpointer = checkpoints.Checkpointer(run_dir, run.keep_checkpoints)
        self.logger = RunLogger(run_dir, setup.iterations * setup.steps_per_iteration)

    def wall(self) -> float:
        return time.monotonic() - self.start

    def run(self, state: TrainState) -> TrainState:
        setup, run = self.setup, self.setup.run
        first = int(state.iteration[0])
        stats = jax.device_get(state.stats)
        self.logged = (stats.completed, stats.return_sum, stats.return_sq_sum)
        self.evaluated = self.logged
        self.saved_completed = int(np.sum(stats.completed))
        try:
            for i in range(first, setup.iterations):
                tick = time.monotonic()
                state, metrics = self.program.iteration(state)
                metrics, stats = jax.device_get((metrics, state.stats))
                if i > first:  # the first iteration of a process includes compilation
                    self.train_time += time.monotonic() - tick
                    self.timed_steps += setup.steps_per_iteration * run.seeds
                steps = (i + 1) * setup.steps_per_iteration
                self._check_finite(metrics, steps)
                self._log_train(i + 1, steps, metrics, stats)
                last = i + 1 == setup.iterations
                if (i + 1) % run.eval_every_n == 0 or last:
                    self._evaluate(state, i, steps, stats)
                self._maybe_save(i + 1, state, stats, last)
                self._progress(steps)
        finally:
            self.logger.close()
            self.checkpointer.close()
        return state

    def _check_finite(self, metrics: dict, steps: int) -> None:
        bad = [k for k, v in metrics.items() if not np.all(np.isfinite(v))]
        if bad:
            raise TrainingError(
                f"non-finite {', '.join(bad)} at step {steps}; training stopped, the last good "
                f"checkpoint in {os.path.join(self.run_dir, 'checkpoints')!r} is kept"
            )

    @staticmethod
    def _episode_summary(stats, since):
        """Per seed: (episodes, mean return, std) of the episodes ended since ``since``."""
        count = stats.completed - since[0]
        total = stats.return_sum - since[1]
        squares = stats.return_sq_sum - since[2]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
            std = np.sqrt(np.maximum(squares / np.maximum(count, 1) - mean**2, 0.0))
        return count, mean, std

    def _log_train(self, iteration: int, steps: int, metrics: dict, stats) -> None:
        count, mean, _ = self._episode_summary(stats, self.logged)
        self.logged = (stats.completed, stats.return_sum, stats.return_sq_sum)
        if np.any(count > 0):  # otherwise the progress line keeps the last known return
            self.latest_return = float(np.nanmean(mean))
        wall = self.wall()
        for k, seed in enumerate(self.setup.seeds):
            self.logger.write(
                {
                    "kind": "train",
                    "step": steps,
                    "wall_s": wall,
                    "seed": seed,
                    "iteration": iteration,
                    "return_mean": float(mean[k]),
                    "episodes": int(count[k]),
                    **{name: float(value[k]) for name, value in metrics.items()},
                }
            )

    def _evaluate(self, state: TrainState, index: int, steps: int, stats) -> None:
        run = self.setup.run
        if run.separate_eval:
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.eval_keys, index)
            returns = np.asarray(self.program.evaluate(state, keys))  # [K, T, n]
            temperatures = run.eval_temperatures
            results = [
                [(r.mean(), r.std(), r.size) for r in seed_returns] for seed_returns in returns
            ]
            greedy = returns[:, self.greedy_index].mean(axis=1)
        else:  # Trax: the training episodes stand for the temperature-1.0 evaluation
            count, mean, std = self._episode_summary(stats, self.evaluated)
            self.evaluated = (stats.completed, stats.return_sum, stats.return_sq_sum)
            temperatures = (1.0,)
            results = [[(mean[k], std[k], int(count[k]))] for k in range(run.seeds)]
            greedy = np.asarray(mean, np.float64)
        wall = self.wall()
        for seed, seed_results in zip(self.setup.seeds, results, strict=True):
            for temperature, (mean, std, episodes) in zip(temperatures, seed_results, strict=True):
                self.logger.write(
                    {
                        "kind": "eval",
                        "step": steps,
                        "wall_s": wall,
                        "seed": seed,
                        "temperature": float(temperature),
                        "return_mean": float(mean),
                        "return_std": float(std),
                        "episodes": int(episodes),
                    }
                )
        self.greedy_history.append(greedy)

    def _maybe_save(self, iteration: int, state: TrainState, stats, last: bool) -> None:
        run = self.setup.run
        completed = int(np.sum(stats.completed))
        enough = self.setup.offline is not None or (  # offline runs have no episodes
            completed - self.saved_completed
            >= run.done_frac_for_policy_save * run.num_envs * run.seeds
        )
        if last or (iteration % run.save_every_n == 0 and enough):
            self.checkpointer.save(iteration, state)
            self.saved_completed = completed

    def _progress(self, steps: int) -> None:
        if self.train_time:
            speed = self.timed_steps / self.train_time
        else:
            speed = steps * self.setup.run.seeds / max(self.wall(), 1e-9)
        greedy = float(np.mean(self.greedy_history[-1])) if self.greedy_history else None
        self.logger.progress(steps, speed, self.latest_return, greedy)

    def summary(self, state: TrainState) -> dict:
        setup = self.setup
        wall = self.wall()
        steps = setup.iterations * setup.steps_per_iteration
        history = np.asarray(self.greedy_history)  # [evaluations, K]
        params = setup.agent.params(state.agent_state)
        per_seed_params = [
            jax.tree.map(lambda x, k=k: x[k], params) for k in range(setup.run.seeds)
        ]
        summary = {
            "run_dir": self.run_dir,
            "steps": steps,
            "wall_s": round(wall, 3),
            "steps_per_s": round(steps * setup.run.seeds / wall, 1),
            "steps_per_s_after_compile": (
                round(self.timed_steps / self.train_time, 1) if self.train_time else None
            ),
            "final_eval_return": _number(np.mean(history[-1])) if len(history) else None,
            "best_eval_return": _best(history.mean(axis=1)) if len(history) else None,
            "params_digest": params_digest(per_seed_params[0] if setup.run.seeds == 1 else params),
        }
        if setup.run.seeds > 1:
            summary["per_seed"] = [
                {
                    "seed": seed,
                    "final_eval_return": _number(history[-1, k]),
                    "best_eval_return": _best(history[:, k]),
                    "params_digest": params_digest(per_seed_params[k]),
                }
                for k, seed in enumerate(setup.seeds)
            ]
        return summary


def _number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _best(values) -> float | None:
    """The largest finite value (an evaluation with no finished episode has none)."""
    finite = np.asarray(values)[np.isfinite(values)]
    return float(finite.max()) if finite.size else None


def train(setup: Setup, run_dir: str) -> dict:
    """Runs a validated setup to its configured steps; returns the final JSON line's fields."""
    if os.path.exists(run_dir) and os.listdir(run_dir):
        raise ConfigError(
            f"run dir {run_dir!r} already exists and is not empty; choose another --run-dir, "
            "or continue it with `heron train --resume`"
        )
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config_record(setup), f, indent=2)
    program = setup.program()
    loop = _Loop(setup, run_dir, program)
    state = program.init(_seed_keys(setup.seeds))
    state = loop.run(state)
    return loop.summary(state)


def resume(run_dir: str, steps: int | None = None) -> dict:
    """Continues ``run_dir`` from its latest checkpoint to its configured ``steps`` (or to a new
    budget ``steps``). With JAX environments on CPU the result equals the uninterrupted run's."""
    from heron.training.evaluate_run import load_config

    algo, agent_config, run = load_config(run_dir)
    if steps is not None:
        run = dataclasses.replace(run, steps=steps)
    setup = build(algo, agent_config, run)
    if checkpoints.latest_step(run_dir) is None:
        raise checkpoints.CheckpointError(
            f"cannot resume {run_dir!r}: it has no checkpoint yet (start it again instead)"
        )
    _check_same_dataset(run_dir, setup)
    program = setup.program()
    template = program.init(_seed_keys(setup.seeds))
    state, iteration = checkpoints.restore(run_dir, template)
    if iteration > setup.iterations:
        raise ConfigError(
            f"{run_dir!r} is already past {run.steps} steps (checkpoint at iteration "
            f"{iteration}); pass a larger --steps to continue it"
        )
    records = _truncate_metrics(run_dir, iteration * setup.steps_per_iteration)
    if steps is not None:
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump(config_record(setup), f, indent=2)
    wall_offset = max((r.get("wall_s") or 0.0 for r in records), default=0.0)
    loop = _Loop(setup, run_dir, program, wall_offset)
    loop.greedy_history = _greedy_history(records, setup)
    if setup.offline is None and not setup.env.is_jax:
        message = (
            "Gymnasium environments cannot be saved in a checkpoint: their episodes "
            "restart on resume"
        )
        print(f"heron: {message}", file=sys.stderr)
        loop.logger.write(
            {
                "kind": "note",
                "step": iteration * setup.steps_per_iteration,
                "wall_s": wall_offset,
                "message": message,
            }
        )
        state = program.restart(state, jax.random.fold_in(jax.random.PRNGKey(run.seed), 3))
    state = loop.run(state)
    return loop.summary(state)


def _check_same_dataset(run_dir: str, setup: Setup) -> None:
    """An offline run resumes only on the data it started with (same episodes and returns)."""
    if setup.offline is None:
        return
    with open(os.path.join(run_dir, "config.json")) as f:
        recorded = json.load(f).get("dataset")
    if recorded is not None and recorded != setup.offline.summary:
        raise ConfigError(
            f"dataset {setup.run.dataset!r} changed since {run_dir!r} started: it held "
            f"{recorded}, it now holds {setup.offline.summary}"
        )


def _truncate_metrics(run_dir: str, step: int) -> list[dict]:
    """Drops the lines written after the checkpoint at ``step``; they will be written again."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    kept = [r for r in records if r.get("step", 0) <= step]
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in kept)
    os.replace(path + ".tmp", path)
    return kept


def _greedy_history(records: list[dict], setup: Setup) -> list[np.ndarray]:
    greedy = min(setup.run.eval_temperatures) if setup.run.separate_eval else 1.0
    by_step: dict[int, dict[int, float]] = {}
    for r in records:
        if r.get("kind") == "eval" and r.get("temperature") == greedy:
            value = r["return_mean"]
            by_step.setdefault(r["step"], {})[r["seed"]] = math.nan if value is None else value
    return [
        np.array([by_step[s].get(seed, math.nan) for seed in setup.seeds]) for s in sorted(by_step)
    ]
