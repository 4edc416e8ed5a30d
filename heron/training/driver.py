"""The training driver: when to collect, learn, evaluate, save and log, for any agent and
any source of experience.

    setup = make_setup(algo, config, run, agent, replay, source, evaluate)
    summary = train(setup, "runs/example")         # the final JSON line's fields
    summary = continue_run(setup, "runs/example")    # from its latest checkpoint

(``heron.api`` builds setups from a RunConfig, choosing the source of experience.)
Each iteration the compiled program collects from the source, adds to the replay and lets
the agent learn (see ``program.py``); evaluation, logging and checkpoints follow on their
schedules. ``seeds`` independent runs share one compiled program.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from heron.agents.base import Agent
from heron.configs import ConfigError
from heron.run_config import RunConfig
from heron.training import checkpoints, controllers, program_cache, rundir, signals
from heron.training.evaluation import Evaluation
from heron.training.logging import RunLogger, WandbSink
from heron.training.program import EXPERIENCE, NON_FINITE, Program, TrainState, make_program
from heron.training.sources import Source


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); the last good checkpoint is kept."""


# What ``--resume`` may change; any other difference from the config recorded with the
# checkpoint is refused.
RESUMABLE_CHANGES = ("run.steps", "heron_version")
# Environment steps (of all seeds) the compiled program takes between two visits of the
# host's loop, at most: its logging, checks and dispatch cost milliseconds, an iteration of
# one env step and one update (SAC on a Gymnasium env) a few.
HOST_VISIT_STEPS = 256


@dataclasses.dataclass
class Setup:
    """Validated pieces of a run, built before anything is written."""

    algo: str
    agent_config: Any
    run: RunConfig
    agent: Agent
    replay: Any
    source: Source
    evaluate: Evaluation | None  # None: the training episodes stand for the evaluation
    record: dict  # config.json's entries
    controller: Any = None  # history -> {hyperparameter: multiplier}, at each evaluation
    programs: program_cache.Store | None = None  # where its exported programs are kept
    observers: tuple = ()  # experience [lanes, T, ...] -> {metric: value} or None, per seed
    compiled: Program | None = dataclasses.field(default=None, repr=False, compare=False)
    # (steps, greedy returns [K]) after each evaluation's lines are written, e.g. a tuner's
    # report; what it raises ends the run there (a pruned trial)
    on_evaluation: Callable[[int, np.ndarray], None] | None = None

    @property
    def steps_per_iteration(self) -> int:
        return self.source.steps_per_iteration

    @property
    def iterations(self) -> int:
        return max(1, math.ceil(self.run.steps / self.steps_per_iteration))

    @property
    def seeds(self) -> list[int]:
        return [self.run.seed + k for k in range(self.run.seeds)]

    @property
    def temperatures(self) -> tuple[float, ...]:
        """The temperatures of its evaluation lines."""
        return (1.0,) if self.evaluate is None else self.evaluate.temperatures

    @property
    def greedy_temperature(self) -> float:
        return min(self.temperatures)

    def program(self) -> Program:
        """The compiled program, made once: its functions keep their traces, so the
        validation in ``make_setup`` and the run share them."""
        if self.compiled is None:
            evaluate = None if self.evaluate is None else self.evaluate.run
            program = make_program(
                self.agent, self.replay, self.source, evaluate, bool(self.observers)
            )  # with observers its iteration also returns the steps: not the stored one's
            self.compiled = program_cache.cached(program, None if self.observers else self.programs)
        return self.compiled


def check_observers(observers) -> tuple:
    """``observers`` as a tuple of callables."""
    observers = tuple(observers or ())
    for observer in observers:
        if not callable(observer):
            raise ConfigError(
                f"observers must be callables (experience -> metrics or None), got {observer!r}"
            )
    return observers


def observed_values(observer, result) -> dict[str, float]:
    """An observer's return value: None, or {metric name: number}; anything else is refused
    naming the observer."""
    if result is None:
        return {}
    name = getattr(observer, "__name__", type(observer).__name__)
    if not isinstance(result, dict) or not all(isinstance(k, str) for k in result):
        raise TrainingError(
            f"observer {name} returned {type(result).__name__}; an observer returns None or "
            "a dict of metric names to numbers"
        )
    try:
        return {key: float(value) for key, value in result.items()}
    except (TypeError, ValueError):
        raise TrainingError(
            f"observer {name} returned values that are not numbers: {result!r}"
        ) from None


def make_setup(
    algo,
    agent_config,
    run,
    agent,
    replay,
    source,
    evaluate,
    extra_record=None,
    controller=None,
    program_cache_dir=None,
    observers=(),
) -> Setup:
    """A setup whose config.json records the run, the agent's config and ``extra_record``;
    traces one iteration abstractly, so an agent that cannot learn from the source (e.g.
    SVG0 from data without behaviour log-probabilities) is refused before anything is
    written. With ``program_cache_dir`` (for programs made only of heron's and its
    libraries' code: see program_cache.py) its programs are exported there, or loaded from
    there when they were before: those were traced, so checked, then, and are not again."""
    from heron import __version__

    record = {
        "algo": algo,
        "run": dataclasses.asdict(run),
        algo: dataclasses.asdict(agent_config),
        "heron_version": __version__,
        **(extra_record or {}),
    }
    if controller is None and run.controller is not None:
        controller = controllers.parse_controller(run.controller)
    if isinstance(controller, controllers.Plateau):  # its hyperparameter, before any write
        controls = agent.controls(jax.eval_shape(agent.init, jax.random.PRNGKey(0)))
        controllers.check_names({controller.name: 1.0}, tuple(controls))
    programs = program_cache.open_store(program_cache_dir, record)
    observers = check_observers(observers)
    setup = Setup(
        algo, agent_config, run, agent, replay, source, evaluate, record, controller, programs,
        observers,
    )  # fmt: skip
    program = setup.program()
    keys = seed_keys(setup.seeds)
    if not program_cache.start_run(program, keys):
        state = jax.eval_shape(program.init, keys)
        check_replay_fits(algo, state.replay_state)
        jax.eval_shape(program.iteration, state, np.int32(1))
    return setup


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (Linux's MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_replay_fits(algo: str, replay_state, available: int | None = None) -> None:
    """Refuses, before anything is allocated, a replay larger than the memory available
    (an Atari replay of 1M stacked frames would take 28 GB: the run would be killed while
    filling it, or swap)."""
    need = sum(
        math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(replay_state)
    )
    available = available_memory() if available is None else available
    if available is not None and need > available:
        raise ConfigError(
            f"the replay would take {need / 2**30:.1f} GiB and this machine has "
            f"{available / 2**30:.1f} GiB available: lower {algo}.replay.capacity (steps kept "
            "per environment), num_envs or seeds"
        )


def seed_keys(seeds: list[int], stream: int | None = None):
    keys = [jax.random.PRNGKey(seed) for seed in seeds]
    if stream is not None:
        keys = [jax.random.fold_in(key, stream) for key in keys]
    return jax.numpy.stack(keys)


class _Loop:
    """The host side of a run: schedules, logs, checkpoints and the summary."""

    def __init__(
        self,
        setup: Setup,
        run_dir: str,
        program: Program,
        wall_offset: float = 0.0,
        resumed_at: int | None = None,
    ):
        self.setup, self.run_dir, self.program = setup, run_dir, program
        run = setup.run
        self.start = time.monotonic() - wall_offset
        self.eval_keys = seed_keys(setup.seeds, stream=1)
        self.greedy_history: list[np.ndarray] = []  # [K] greedy returns per evaluation
        self.last_eval: list[dict] = []  # per seed, the latest evaluation's greedy line
        self.train_time, self.timed_steps = 0.0, 0
        self.latest_return = math.nan  # mean return of the latest episodes to end
        self.checkpointer = self.best_checkpointer = None
        if run.checkpoints:
            self.checkpointer = checkpoints.Checkpointer(run_dir, run.keep_checkpoints)
            self.best_checkpointer = checkpoints.Checkpointer(run_dir, 1, kind=checkpoints.BEST)
        self.stops = signals.StopRequests()
        self.reached_at: int | None = None  # the step whose evaluation reached stop_at_return
        self.history: list[dict] = []  # every line written, for the controller
        self.advised: set[str] = set()
        self.saved_iteration: int | None = None
        self.first_steps = None  # a fresh run's first steps, until its observers see them
        self.logger = RunLogger(
            run_dir,
            setup.iterations * setup.steps_per_iteration,
            seeds=run.seeds,
            summaries=run.summaries,
            purge_step=None if resumed_at is None else resumed_at + 1,
            wandb=(
                WandbSink(run_dir, run.wandb_project, rundir.read_config(run_dir))
                if run.wandb
                else None
            ),
        )
        self.videos = None
        if run.video_every_n is not None:
            from heron.acting import EvaluationVideos

            self.videos = EvaluationVideos(setup)

    def wall(self) -> float:
        return time.monotonic() - self.start

    def episodes(self, state: TrainState):
        episodes = jax.vmap(self.setup.source.episodes, axis_size=self.setup.run.seeds)
        return jax.device_get(episodes(state.source_state))

    def run(self, state: TrainState) -> TrainState:
        first = int(state.iteration[0])
        if first == 0 and self.setup.observers:  # the environments' first steps, observed
            last_steps = jax.vmap(self.setup.source.last_steps)  # with the first iteration's
            self.first_steps = jax.device_get(last_steps(state.source_state))
        stats = self.episodes(state)
        self.logged = (stats.completed, stats.return_sum, stats.return_sq_sum)
        self.evaluated = self.logged
        self.saved_done = int(np.sum(stats.done))
        self.best = max((float(np.mean(g)) for g in self.greedy_history), default=-math.inf)
        try:
            with self.stops:
                done = first
                while done < self.setup.iterations:
                    count = self._count(done)
                    state = self._iterations(state, done, count, first)
                    done += count
                    if self.stops.signal_number is not None:
                        self._stop(done, state)
                    if self.reached_at is not None:
                        break
        finally:
            self.logger.close()
            if self.videos is not None:
                self.videos.close()
            for checkpointer in (self.checkpointer, self.best_checkpointer):
                if checkpointer is not None:
                    checkpointer.close()
        return state

    def _count(self, done: int) -> int:
        """How many iterations the next call runs, after ``done``: enough for about
        ``HOST_VISIT_STEPS`` steps, and never past the next evaluation, checkpoint or the
        end (observers see every iteration's steps, and some sources ask for every
        iteration: one)."""
        setup, run = self.setup, self.setup.run
        if setup.observers or not setup.source.iterations_in_one_call:
            return 1
        count = max(1, HOST_VISIT_STEPS // (setup.steps_per_iteration * run.seeds))
        periods = [run.eval_every_n] + ([run.save_every_n] if self.checkpointer else [])
        ends = [setup.iterations] + [(done // n + 1) * n for n in periods]
        return min(count, *(end - done for end in ends))

    def _iterations(self, state: TrainState, done: int, count: int, first: int) -> TrainState:
        """``count`` iterations after ``done`` in one call, then the host's work: one train
        line, and the evaluation, controller and checkpoint when they are due."""
        setup, run = self.setup, self.setup.run
        tick = time.monotonic()
        state, metrics = self.program.iteration(state, np.int32(count))
        metrics = jax.device_get(metrics)
        experience = metrics.pop(EXPERIENCE, None)
        stats = self.episodes(state)
        if done > first:  # the first call of a process includes compilation
            self.train_time += time.monotonic() - tick
            self.timed_steps += count * setup.steps_per_iteration * run.seeds
        i = done + count - 1  # the index of the last iteration run
        steps = (i + 1) * setup.steps_per_iteration
        inputs = {k: v for k, v in metrics.items() if k.startswith(NON_FINITE)}
        metrics = {k: v for k, v in metrics.items() if not k.startswith(NON_FINITE)}
        self._check_finite(metrics, inputs, steps)
        if experience is not None:
            metrics.update(self._observe(experience))
        self._advise(metrics, steps)
        self._log_train(i + 1, steps, metrics, stats)
        last = i + 1 == setup.iterations
        if (i + 1) % run.eval_every_n == 0 or last:
            self._evaluate(state, i, steps, stats)
            state = self._control(state, steps)
            last = last or self._reached_return(steps)
        self._maybe_save(i + 1, state, stats, last)
        self._progress(steps)
        return state

    def _stop(self, iteration: int, state: TrainState) -> None:
        steps = iteration * self.setup.steps_per_iteration
        name = self.stops.name
        self._write(
            {"kind": "note", "step": steps, "wall_s": self.wall(), "message": f"stopped by {name}"}
        )
        if self.checkpointer is None:
            raise self.stops.stopped(steps, None, self.run_dir)
        if self.saved_iteration != iteration:
            self._save(iteration, state)
        raise self.stops.stopped(steps, iteration, self.run_dir)

    def _check_finite(self, metrics: dict, inputs: dict, steps: int) -> None:
        bad = [k for k, v in metrics.items() if not np.all(np.isfinite(v))]
        if not bad:
            return
        sources = [k.removeprefix(NON_FINITE) for k, v in inputs.items() if np.any(v > 0)]
        where = (
            f"the environment produced non-finite {' and '.join(sources)}"
            if sources
            else "the learner's, from finite observations and rewards"
        )
        saved = checkpoints.latest_step(self.run_dir)
        if self.checkpointer is None:
            kept = "the run saves no checkpoints (--no-checkpoints)"
        elif saved is not None:
            kept = f"the last good checkpoint ({saved}) in {self.run_dir!r} is kept"
        else:
            kept = (
                f"no checkpoint was written yet: `heron train --resume {self.run_dir}` "
                "starts it again"
            )
        raise TrainingError(
            f"non-finite {', '.join(bad)} at step {steps} ({where}); training stopped, {kept}"
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

    def _observe(self, experience) -> dict:
        """Each observer called with each seed's steps of this iteration; the values they
        return, as metrics [K] named ``metrics/<name>``."""
        if self.first_steps is not None:
            experience = jax.tree.map(
                lambda a, b: np.concatenate([a, b], axis=2), self.first_steps, experience
            )  # [K, lanes, 1 + T]
            self.first_steps = None
        values: dict[str, list] = {}
        for k in range(self.setup.run.seeds):
            steps = jax.tree.map(lambda x, k=k: x[k], experience)
            for observer in self.setup.observers:
                result = observer(steps)
                for name, value in observed_values(observer, result).items():
                    values.setdefault(f"metrics/{name}", [math.nan] * self.setup.run.seeds)[k] = (
                        value
                    )
        return {name: np.asarray(seed_values) for name, seed_values in values.items()}

    def _log_train(self, iteration: int, steps: int, metrics: dict, stats) -> None:
        count, mean, _ = self._episode_summary(stats, self.logged)
        self.logged = (stats.completed, stats.return_sum, stats.return_sq_sum)
        if np.any(count > 0):  # otherwise the progress line keeps the last known return
            self.latest_return = float(np.nanmean(mean))
        wall = self.wall()
        for k, seed in enumerate(self.setup.seeds):
            self._write(
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
        setup = self.setup
        if setup.evaluate is not None:
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.eval_keys, index)
            results = jax.device_get(self.program.evaluate(state, keys))  # [K, ...]
            lines = [
                setup.evaluate.lines(jax.tree.map(lambda x, k=k: x[k], results))
                for k in range(setup.run.seeds)
            ]
        else:  # Trax: the training episodes stand for the temperature-1.0 evaluation
            count, mean, std = self._episode_summary(stats, self.evaluated)
            self.evaluated = (stats.completed, stats.return_sum, stats.return_sq_sum)
            lines = [
                [{"temperature": 1.0, "return_mean": float(mean[k]),
                  "return_std": float(std[k]), "episodes": int(count[k])}]
                for k in range(setup.run.seeds)
            ]  # fmt: skip
        greedy_index = int(np.argmin(setup.temperatures))
        greedy = np.asarray([seed_lines[greedy_index]["return_mean"] for seed_lines in lines])
        self.last_eval = [seed_lines[greedy_index] for seed_lines in lines]
        wall = self.wall()
        for seed, seed_lines in zip(setup.seeds, lines, strict=True):
            for line in seed_lines:
                self._write({"kind": "eval", "step": steps, "wall_s": wall, "seed": seed, **line})
        self.greedy_history.append(greedy.astype(np.float64))
        if self.videos is not None and len(self.greedy_history) % setup.run.video_every_n == 0:
            frames, _ = self.videos.record(state, steps)
            self.logger.video(frames, steps, setup.seeds[0])
        mean = float(np.mean(greedy))
        if math.isfinite(mean) and mean > self.best:  # SB3's best model: the best greedy eval
            self.best = mean
            if self.best_checkpointer is not None:
                self.best_checkpointer.save(index + 1, state, self.setup.record)
        if setup.on_evaluation is not None:
            setup.on_evaluation(steps, greedy)

    def _reached_return(self, steps: int) -> bool:
        """Whether the latest greedy evaluation reached stop_at_return on every seed (then
        the run ends after this iteration's checkpoint)."""
        threshold = self.setup.run.stop_at_return
        greedy = self.greedy_history[-1]
        if threshold is None or not np.all(greedy >= threshold):
            return False
        self.reached_at = steps
        message = (
            f"greedy return {float(np.mean(greedy)):.1f} reached stop_at_return={threshold:g} "
            f"at step {steps}: the run ends here"
        )
        print(f"heron: {message}", file=sys.stderr)
        self._write(
            {"kind": "note", "step": steps, "wall_s": self.wall(), "topic": "stop_at_return",
             "message": message}
        )  # fmt: skip
        return True

    def _advise(self, metrics: dict, steps: int) -> None:
        """The agent's warnings about its metrics, each topic printed and logged once a run."""
        if self.setup.agent.advise is None:
            return
        for k, seed in enumerate(self.setup.seeds):
            advice = self.setup.agent.advise({n: float(v[k]) for n, v in metrics.items()})
            for topic, message in advice.items():
                if topic not in self.advised:
                    self.advised.add(topic)
                    print(f"heron: warning: {message}", file=sys.stderr)
                    note = {"kind": "note", "step": steps, "wall_s": self.wall(), "seed": seed}
                    self._write({**note, "topic": topic, "message": message})

    def _write(self, record: dict) -> None:
        self.history.append(record)
        self.logger.write(record)

    def _control(self, state: TrainState, steps: int) -> TrainState:
        """The controller's multipliers for each seed, from that seed's history."""
        if self.setup.controller is None:
            return state
        agent = self.setup.agent
        controls = jax.device_get(agent.controls(state.agent_state))
        changed = False
        for k, seed in enumerate(self.setup.seeds):
            values = self.setup.controller([r for r in self.history if r.get("seed") == seed])
            controllers.check_names(values, tuple(controls))
            if all(float(controls[name][k]) == float(v) for name, v in values.items()):
                continue
            for name, value in values.items():
                controls[name] = np.array(controls[name])
                controls[name][k] = value
            changed = True
            self._write(
                {"kind": "control", "step": steps, "wall_s": self.wall(), "seed": seed,
                 "values": {name: float(v) for name, v in values.items()}}
            )  # fmt: skip
        if not changed:
            return state
        controls = jax.tree.map(jax.numpy.asarray, controls)
        return state._replace(agent_state=agent.with_controls(state.agent_state, controls))

    def _save(self, iteration: int, state: TrainState) -> None:
        if self.checkpointer is not None:
            self.checkpointer.save(iteration, state, self.setup.record)
            self.saved_iteration = iteration

    def _maybe_save(self, iteration: int, state: TrainState, stats, last: bool) -> None:
        run = self.setup.run
        # Trax's rule counts the episodes that are done, not those cut by max_timestep.
        done = int(np.sum(stats.done))
        episodes_needed = run.done_frac_for_policy_save * self.setup.source.num_envs * run.seeds
        enough = done - self.saved_done >= episodes_needed
        if last or (iteration % run.save_every_n == 0 and enough):
            self._save(iteration, state)
            self.saved_done = done

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
        history = np.asarray(self.greedy_history)  # [evaluations, K]
        steps = self.reached_at or setup.iterations * setup.steps_per_iteration
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
            "params_digest": rundir.params_digest(
                per_seed_params[0] if setup.run.seeds == 1 else params
            ),
            "preset": setup.run.preset,
        }
        if setup.run.stop_at_return is not None:
            summary["stopped_at_return"] = self.reached_at is not None
        summary.update(_evaluation_details(self.last_eval))
        first_seed = jax.tree.map(lambda x: x[0], state.source_state)
        summary.update(setup.source.summary(first_seed))  # e.g. what the source's actors did
        if setup.run.seeds > 1:
            summary["per_seed"] = [
                {
                    "seed": seed,
                    "final_eval_return": _number(history[-1, k]),
                    "best_eval_return": _best(history[:, k]),
                    "params_digest": rundir.params_digest(per_seed_params[k]),
                }
                for k, seed in enumerate(setup.seeds)
            ]
        return summary


def _evaluation_details(lines: list[dict]) -> dict:
    """What an evaluation reports beside the return (a model's ``quantity`` and
    ``eval/<metric>``s), from its latest greedy line, averaged over seeds."""
    if not lines:
        return {}
    details = {k: v for k, v in lines[0].items() if k == "quantity"}
    for name in (k for k in lines[0] if k.startswith("eval/")):
        details[name] = _number(np.mean([line[name] for line in lines]))
    return details


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
    with rundir.RunLock(run_dir):
        rundir.write_config(run_dir, setup.record)
        return _run_from_start(setup, run_dir)


def _run_from_start(setup: Setup, run_dir: str) -> dict:
    program = setup.program()
    loop = _Loop(setup, run_dir, program)
    state = program.init(seed_keys(setup.seeds))
    state = loop.run(state)
    return loop.summary(state)


def restore(setup: Setup, run_dir: str, kind: str = checkpoints.LATEST):
    """(program, state, iteration) of the latest checkpoint of ``run_dir`` under ``setup``
    (``kind=checkpoints.BEST``: of its best greedy evaluation)."""
    program = setup.program()
    # The state's shapes only: a source's init may start processes or reset environments.
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    template = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),
        jax.eval_shape(program.init, seed_keys(setup.seeds)),
    )
    state, iteration = checkpoints.restore(run_dir, template, kind=kind)
    return program, state, iteration


def continue_run(setup: Setup, run_dir: str, rewrite_config: bool = False) -> dict:
    """Continues ``run_dir`` from its latest checkpoint to the setup's steps (a run stopped
    before its first checkpoint, with no training recorded, starts again from the beginning;
    one whose history outlived its checkpoints is refused). With JAX environments on
    CPU the result equals the uninterrupted run's."""
    if not setup.run.checkpoints:
        raise ConfigError(
            f"{run_dir!r} was trained with --no-checkpoints: it has nothing to resume from"
        )
    with rundir.RunLock(run_dir):
        if checkpoints.latest_step(run_dir) is None:
            rundir.restart_from_scratch(run_dir)
            print(
                f"heron: {run_dir!r} stopped before its first checkpoint: starting it again",
                file=sys.stderr,
            )
            rundir.write_config(run_dir, setup.record)
            return _run_from_start(setup, run_dir)
        return _continue(setup, run_dir, rewrite_config)


def _continue(setup: Setup, run_dir: str, rewrite_config: bool) -> dict:
    program, state, iteration = restore(setup, run_dir)
    checkpoints.check_unchanged_config(run_dir, iteration, setup.record, RESUMABLE_CHANGES)
    if iteration > setup.iterations:
        raise ConfigError(
            f"{run_dir!r} is already past {setup.run.steps} steps (checkpoint at iteration "
            f"{iteration}); pass a larger --steps to continue it"
        )
    records = rundir.truncate_metrics(run_dir, iteration * setup.steps_per_iteration)
    reached = [r for r in records if r.get("topic") == "stop_at_return"]
    if reached:
        raise ConfigError(
            f"{run_dir!r} ended at step {reached[-1]['step']}: its greedy return reached "
            f"stop_at_return={setup.run.stop_at_return:g}; there is nothing to resume "
            f"(`heron eval {run_dir}` evaluates it)"
        )
    if rewrite_config:
        rundir.write_config(run_dir, setup.record)
    wall_offset = max((r.get("wall_s") or 0.0 for r in records), default=0.0)
    loop = _Loop(setup, run_dir, program, wall_offset, iteration * setup.steps_per_iteration)
    loop.greedy_history = rundir.greedy_history(records, setup.greedy_temperature, setup.seeds)
    loop.history = list(records)
    loop.advised = {r["topic"] for r in records if r.get("kind") == "note" and "topic" in r}
    note = setup.source.resume_note
    if note is not None:
        print(f"heron: {note}", file=sys.stderr)
        loop._write(
            {
                "kind": "note",
                "step": iteration * setup.steps_per_iteration,
                "wall_s": wall_offset,
                "message": note,
            }
        )
    restart_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(seed_keys(setup.seeds), 3)
    state = program.restart(state, restart_keys)
    state = loop.run(state)
    return loop.summary(state)
