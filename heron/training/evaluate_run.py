"""Reading a run directory back: its configuration and latest checkpoint."""

from __future__ import annotations

import json
import os
import types
import typing

import jax

from heron import agents, envs
from heron.replay import make_replay
from heron.training import checkpoints
from heron.training.config import RunConfig
from heron.training.evaluation import make_evaluate
from heron.training.loop import init_train_state


class RunDirError(ValueError):
    """A run directory that is missing, empty or unreadable."""


def _coerce(config_type, values: dict):
    """Builds a config dataclass from JSON values (lists back to tuples)."""
    hints = typing.get_type_hints(config_type)
    kwargs = {}
    for name, value in values.items():
        if name not in hints:
            raise RunDirError(f"unknown field {name!r} for {config_type.__name__} in config.json")
        origin = typing.get_origin(hints[name])
        if isinstance(value, list) and (
            origin is tuple or isinstance(hints[name], types.UnionType)
        ):
            value = tuple(value)
        kwargs[name] = value
    return config_type(**kwargs)


def load_config(run_dir: str):
    """(algo, agent config, RunConfig) of a run directory."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        raise RunDirError(f"run dir {run_dir!r} does not exist")
    if not os.path.isfile(path):
        raise RunDirError(f"run dir {run_dir!r} has no config.json: not a heron run")
    try:
        with open(path) as f:
            record = json.load(f)
        algo = record["algo"]
        agent_config = _coerce(agents.config_class(algo), record[algo])
        run = _coerce(RunConfig, record["run"])
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise RunDirError(f"{path!r} is unreadable: {error}") from error
    return algo, agent_config, run


def evaluate_run(run_dir: str, episodes: int, temperature: float) -> dict:
    """Evaluates the latest checkpoint of ``run_dir``; returns the JSON line's fields."""
    algo, agent_config, run = load_config(run_dir)
    env = envs.make(run.env, run.num_envs, run.max_timestep)
    agent = agents.make(algo, env.spec, agent_config)
    replay = make_replay(agent.schedule.replay)
    template = init_train_state(agent, env, replay, jax.random.PRNGKey(run.seed))
    if not env.is_jax:
        template = template._replace(env_state=None)
    state, step = checkpoints.restore(run_dir, template)
    eval_env = envs.make(run.env, episodes, run.max_timestep_eval)
    evaluate = make_evaluate(agent, eval_env, (temperature,))
    (result,) = evaluate(state.agent_state, jax.random.fold_in(jax.random.PRNGKey(run.seed), 2))
    from heron.training.driver import params_digest

    return {
        "run_dir": run_dir,
        "checkpoint": step,
        "steps": int(state.env_steps),
        "temperature": temperature,
        "return_mean": result.mean,
        "return_std": result.std,
        "episodes": episodes,
        "params_digest": params_digest(agent.params(state.agent_state)),
    }
