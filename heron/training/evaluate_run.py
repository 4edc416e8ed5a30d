"""Reading a run directory back: its configuration and latest checkpoint."""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing

import jax
import numpy as np

from heron import agents
from heron.training import checkpoints
from heron.training.config import RunConfig


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


def load_run(run_dir: str, **run_changes):
    """(setup, program, state, checkpoint) of the latest checkpoint of ``run_dir``, its run
    configuration changed by ``run_changes`` (e.g. ``n_evals``); states carry the seed axis."""
    from heron.training.driver import _seed_keys, build

    algo, agent_config, run = load_config(run_dir)
    setup = build(algo, agent_config, dataclasses.replace(run, **run_changes))
    program = setup.program()
    state, step = checkpoints.restore(run_dir, program.init(_seed_keys(setup.seeds)))
    return setup, program, state, step


def evaluate_run(run_dir: str, episodes: int, temperature: float) -> dict:
    """Evaluates the latest checkpoint of ``run_dir``; returns the JSON line's fields (with
    several seeds: the mean over seeds, and ``per_seed``)."""
    from heron.training.driver import _seed_keys, params_digest

    setup, program, state, step = load_run(
        run_dir, n_evals=episodes, eval_temperatures=(temperature,)
    )
    run = setup.run
    returns = np.asarray(program.evaluate(state, _seed_keys(setup.seeds, 2)))[:, 0]
    params = setup.agent.params(state.agent_state)
    per_seed = [jax.tree.map(lambda x, k=k: x[k], params) for k in range(run.seeds)]
    result = {
        "run_dir": run_dir,
        "checkpoint": step,
        "steps": step * setup.steps_per_iteration,
        "temperature": temperature,
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "episodes": episodes,
        "params_digest": params_digest(per_seed[0] if run.seeds == 1 else params),
    }
    if run.seeds > 1:
        result["per_seed"] = [
            {
                "seed": seed,
                "return_mean": float(r.mean()),
                "return_std": float(r.std()),
                "params_digest": params_digest(p),
            }
            for seed, r, p in zip(setup.seeds, returns, per_seed, strict=True)
        ]
    return result
