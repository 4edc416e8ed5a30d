"""``heron tune``: hyperparameter search with Optuna, as RL Zoo runs it.

Each trial is a normal training run (``<study dir>/trial_<n>``) of the algorithm's settings
(its preset for the environment, then the options given) with the trial's sampled values on
top. The sampler is TPE; the median pruner stops a trial whose greedy evaluation falls
below the median of the earlier trials' at the same step. A trial's value is its final
greedy return (the mean over its seeds: ``--seeds K`` runs K seeds in one program on a JAX
environment, so each trial is scored on K seeds for about the cost of one). The study lives
in ``<study dir>/study.db`` (Optuna's SQLite storage), so the same command resumes it; the
best trial so far is written as a preset entry (``<study dir>/best_preset.toml``).

Search spaces are files beside the presets, ``heron/presets/<algo>.search.toml``: each key an
option (dotted for a nested one), each value ``{ low, high, log }`` or ``{ choices }``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import tomllib

from heron.configs import ConfigError, from_values
from heron.presets import FOLDER, SEARCH_SPACE

STUDY_NAME = "heron"
STORAGE = "study.db"
BEST_PRESET = "best_preset.toml"


class TuneError(ConfigError):
    """A tuning request heron cannot run."""


def search_space_path(algo: str) -> str:
    return os.path.join(FOLDER, algo + SEARCH_SPACE)


def search_space(algo: str) -> dict[str, dict]:
    """``algo``'s search space: {option: {"low", "high", "log"} or {"choices"}}."""
    path = search_space_path(algo)
    if not os.path.isfile(path):
        known = sorted(
            name.removesuffix(SEARCH_SPACE)
            for name in os.listdir(FOLDER)
            if name.endswith(SEARCH_SPACE)
        )
        raise TuneError(
            f"no search space for {algo} (heron/presets/{algo}.search.toml); the algorithms "
            f"with one: {', '.join(known)}"
        )
    with open(path, "rb") as f:
        space = tomllib.load(f)
    for name, spec in space.items():
        if not (
            isinstance(spec, dict) and ({"choices"} == set(spec) or {"low", "high"} <= set(spec))
        ):
            raise TuneError(f"{path}: {name} needs {{ low, high[, log] }} or {{ choices }}")
    return space


def sample(trial, space: dict[str, dict]) -> dict:
    """The trial's values of every option of ``space``, by option name (dotted)."""
    values = {}
    for name, spec in space.items():
        if "choices" in spec:  # Optuna's choices are scalars: lists go by their JSON text
            labels = [json.dumps(choice) for choice in spec["choices"]]
            values[name] = json.loads(trial.suggest_categorical(name, labels))
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int):
            values[name] = trial.suggest_int(
                name, spec["low"], spec["high"], log=spec.get("log", False)
            )
        else:
            low, high = float(spec["low"]), float(spec["high"])
            values[name] = trial.suggest_float(name, low, high, log=spec.get("log", False))
    return values


def nested(values: dict) -> dict:
    """{"network.hidden_sizes": v} -> {"network": {"hidden_sizes": v}}."""
    tree: dict = {}
    for name, value in values.items():
        *parents, leaf = name.split(".")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return tree


def with_values(agent_config, values: dict):
    """``agent_config`` with the sampled ``values`` on top (refused if one names no option)."""
    try:
        return from_values(type(agent_config), nested(values), agent_config)
    except (TypeError, KeyError) as error:
        raise TuneError(f"the search space names an option the config lacks: {error}") from error


# Run fields a preset does not set: the run's identity and files, not its settings.
NOT_PRESET_RUN_FIELDS = (
    "env", "seed", "seeds", "run_dir", "preset", "env_module", "wandb", "wandb_project",
    "video_every_n", "summaries", "checkpoints",
)  # fmt: skip


def changed(config, default) -> dict:
    """The fields of ``config`` that differ from ``default``, nested configs as tables of
    their own changed fields (dotted names), tuples as lists."""
    values = {}
    for field in dataclasses.fields(config):
        value, base = getattr(config, field.name), getattr(default, field.name)
        if dataclasses.is_dataclass(value):
            values.update({f"{field.name}.{k}": v for k, v in changed(value, base).items()})
        elif value != base and value is not None:  # TOML has no None: the default stays
            values[field.name] = list(value) if isinstance(value, tuple) else value
    return values


def _toml_value(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def preset_entry(algo: str, env: str, values: dict, run_values: dict, comment: str) -> str:
    """A preset entry (heron/presets/<algo>.toml's layout) with ``values`` on the agent's
    options and ``run_values`` on the run's."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines.append(f'["{env}".run]')
    lines += [f"{name} = {_toml_value(value)}" for name, value in run_values.items()]
    tree = nested(values)

    def table(prefix: str, node: dict) -> None:
        lines.append(f'["{env}".{prefix}]')
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in node.items() if not isinstance(v, dict))
        for key, child in node.items():
            if isinstance(child, dict):
                table(f"{prefix}.{key}", child)

    table(algo, tree)
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    trials: int
    timeout: float | None
    study_dir: str
    seed: int = 0
    startup_trials: int = 5  # TPE's random trials first; the pruner's trials before pruning


def tune(algo: str, agent_config, run, config: TuneConfig, program_cache=None) -> dict:
    """Runs (or resumes) the study until it holds ``config.trials`` finished trials or
    ``config.timeout`` seconds have passed; returns the final JSON line's fields."""
    if importlib.util.find_spec("optuna") is None:
        raise TuneError("heron tune needs optuna: pip install 'heron[tune]' (make install has it)")
    import optuna

    from heron import api
    from heron.training.driver import TrainingError

    if config.trials <= 0:
        raise TuneError(f"--trials must be > 0, got {config.trials}")
    if config.timeout is not None and not config.timeout > 0:
        raise TuneError(f"--timeout must be > 0 seconds, got {config.timeout}")
    if run.run_dir is not None:
        raise TuneError("--run-dir is the tuner's: each trial runs in <study dir>/trial_<n>")
    if run.controller is not None:
        raise TuneError("--controller changes the hyperparameters a trial is scored on: remove it")
    space = search_space(algo)
    # the run as a trial runs it, checked once before the study (traced, not compiled)
    api.build(algo, with_values(agent_config, {n: _any_value(v) for n, v in space.items()}), run)
    os.makedirs(config.study_dir, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=STUDY_NAME,
        storage=f"sqlite:///{os.path.abspath(os.path.join(config.study_dir, STORAGE))}",
        load_if_exists=True,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(
            seed=config.seed, n_startup_trials=config.startup_trials
        ),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=config.startup_trials),
    )

    def objective(trial) -> float:
        values = sample(trial, space)
        trial_config = with_values(agent_config, values)
        run_dir = os.path.join(config.study_dir, f"trial_{trial.number:03d}")
        setup = api.build(
            algo,
            trial_config,
            dataclasses.replace(run, run_dir=run_dir),
            program_cache=program_cache,
        )

        def report(steps: int, greedy) -> None:
            trial.report(float(sum(greedy) / len(greedy)), steps)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {steps}")

        setup.on_evaluation = report
        summary = api.train(setup, run_dir)
        value = summary["final_eval_return"]
        if value is None or not math.isfinite(value):
            raise optuna.TrialPruned("no finite final return")
        return float(value)

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    remaining = config.trials - len(study.get_trials(deepcopy=False, states=finished))
    if remaining > 0:  # a failed trial (a sampled combination a run refuses) counts too
        study.optimize(
            objective,
            n_trials=remaining,
            timeout=config.timeout,
            catch=(ConfigError, TrainingError),
            gc_after_trial=True,
        )
    return _summary(study, algo, agent_config, run, config)


def _any_value(spec: dict):
    return spec["choices"][0] if "choices" in spec else spec["low"]


def _summary(study, algo: str, agent_config, run, config: TuneConfig) -> dict:
    import optuna

    states = optuna.trial.TrialState
    counts = {
        name: len(study.get_trials(deepcopy=False, states=(state,)))
        for name, state in (
            ("complete", states.COMPLETE),
            ("pruned", states.PRUNED),
            ("failed", states.FAIL),
        )
    }
    summary = {"study_dir": config.study_dir, "trials": sum(counts.values()), **counts}
    if counts["complete"] == 0:
        return {**summary, "best_trial": None, "best_value": None, "preset": None}
    best = study.best_trial
    values = {name: json.loads(v) if isinstance(v, str) else v for name, v in best.params.items()}
    comment = (
        f"heron tune {algo} --env {run.env}: trial {best.number} of {summary['trials']}\n"
        f"({counts['complete']} complete, {counts['pruned']} pruned), final greedy return "
        f"{best.value:.2f} over {run.seeds} seed(s) at {run.steps} steps"
    )
    trial_config = with_values(agent_config, values)
    agent_values = changed(trial_config, type(trial_config)())
    run_values = {
        name: value
        for name, value in changed(run, type(run)()).items()
        if name not in NOT_PRESET_RUN_FIELDS
    }
    path = os.path.join(config.study_dir, BEST_PRESET)
    with open(path, "w") as f:
        f.write(preset_entry(algo, run.env, agent_values, run_values, comment))
    return {
        **summary,
        "best_trial": best.number,
        "best_value": best.value,
        "best_params": values,
        "best_run_dir": os.path.join(config.study_dir, f"trial_{best.number:03d}"),
        "preset": path,
    }
