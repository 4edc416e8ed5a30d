"""``heron train | tune | eval | plot | collect | check-env``: the command line.

    heron train ALGO [--env ID] [--env-module MODULE] [--steps N] [--seed S] [--num-envs E]
                     [--run-dir DIR] [--eval-every-n I] [--n-evals N]
                     [--eval-temperatures T ...] [--save-every-n I] [--dataset DATASET]
                     [--ALGO.FIELD VALUE ...]
    heron eval RUN_DIR [--episodes N] [--temperature T]
    heron collect RUN_DIR --episodes N --out DATASET [--temperature T] [--epsilon E]
    heron check-env ID [--env-module MODULE] [--steps N] [--seed S]

Exit status: 0 done; 2 bad input (an unknown option, value, environment, run dir or
dataset); 1 the command could not go on (a non-finite loss, an OS error such as a read-only
directory or a full disk, an environment check that found problems); 130 interrupted. Errors
print one line on stderr (``heron: error: ...``). JAX's persistent compilation cache lives in
``$XDG_CACHE_HOME/heron/jax`` (default ~/.cache/heron/jax), with the programs ``heron train``
exported for later runs of the same configuration in its ``heron-programs`` folder;
``HERON_COMPILE_CACHE=DIR`` moves both and ``HERON_COMPILE_CACHE=off`` disables both.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import json
import logging
import os
import sys
import threading

import tyro

USAGE = """usage: heron train ALGO [options] [--ALGO.FIELD VALUE ...]
       heron train [ALGO] --config FILE [options]   (TOML/YAML/JSON; a run's config.json)
       heron train --resume RUN_DIR [--steps N]
       heron train ALGO --dataset DATASET [--env ID]   (default: the env the dataset records)
       heron train world-model --dataset DATASET [--env ID] [--world-model.FIELD VALUE ...]
       heron eval RUN_DIR [--episodes N] [--temperature T] [--best] [--video OUT.gif]
       heron plot RUN_DIR [RUN_DIR ...] --out FILE.png [--temperatures T ...]
       heron collect RUN_DIR --episodes N --out DATASET [--temperature T] [--epsilon E]
       heron check-env ID [--env-module MODULE] [--steps N] [--seed S]
       heron tune ALGO --env ID --trials N [--timeout S] [--study-dir DIR] [train options]
run `heron train ALGO --help` for every option of an algorithm"""


class UsageError(ValueError):
    """A command line heron cannot run."""


def _cli(config_type, argv: list[str], prog: str, **kwargs):
    """``tyro.cli`` whose parse errors are heron's one line: a UsageError naming the
    problem (a ConfigError for a value the config refuses); ``--help`` prints and exits as
    usual. tyro's parse-error hook gives the failure as data (tyro is pinned: the hook is
    not yet part of its stable API)."""
    from tyro import _errors

    def refuse(event):
        if isinstance(event, _errors.InstantiationFailure) and event.argument is None:
            from heron.configs import ConfigError  # (imports JAX: only where a config is)

            raise ConfigError(event.message)  # the config's own validation
        suggestion = _suggestions(event, config_type)
        raise UsageError(f"{_describe(event, prog)}{suggestion} (see `{prog} --help`)")

    with _errors.on_parse_error(refuse):
        return tyro.cli(config_type, args=argv, prog=prog, **kwargs)


def _describe(event, prog: str) -> str:
    """One line of what tyro refused."""
    from tyro import _errors

    if isinstance(event, _errors.UnrecognizedArgs):
        return f"Unrecognized options: {', '.join(event.tokens)}"
    if isinstance(event, _errors.MissingArgs):
        missing = [_argument_name(item.arg, metavar=True) for item in event.missing_arguments]
        return f"Missing from {prog}: {', '.join(missing)}"
    if isinstance(event, _errors.InvalidChoice):
        return (
            f"invalid choice {event.value!r} for {_argument_name(event.argument)}: expected one "
            f"of {', '.join(event.choices)}"
        )
    if isinstance(event, _errors.BadValue | _errors.InstantiationFailure):
        reason = event.reason if isinstance(event, _errors.BadValue) else event.message
        return f"Error parsing {_argument_name(event.argument)}: {reason}"
    return f"the command line does not parse ({type(event).__name__})"


def _argument_name(argument, metavar: bool = False) -> str:
    """``--steps`` (with ``metavar``: ``--steps INT``), or a positional's name: RUN_DIR."""
    flag = argument.lowered.name_or_flags[0]
    if not flag.startswith("-"):
        return flag.upper()
    return f"{flag} {argument.lowered.metavar}" if metavar else flag


def _suggestions(event, config_type) -> str:
    """``; did you mean --x?`` for unrecognized options close to one of ``config_type``'s
    (``--x for --y, ...`` when several are misspelt)."""
    from tyro import _errors

    if not isinstance(event, _errors.UnrecognizedArgs):
        return ""
    known = sorted({option for option, _ in _option_names(config_type, "")})
    typos = [token.split("=", 1)[0] for token in event.tokens if token.startswith("--")]
    hints = []
    for typo in typos:
        close = difflib.get_close_matches(typo, known, n=2, cutoff=0.8)
        if close:
            hints.append(" or ".join(close) + (f" for {typo}" if len(typos) > 1 else ""))
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def compile_cache_dir() -> str | None:
    """The directory of JAX's persistent compilation cache; None with HERON_COMPILE_CACHE=off."""
    setting = os.environ.get("HERON_COMPILE_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no", "none"):
        return None
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return setting or os.path.join(cache_home, "heron", "jax")


def program_cache_dir(compile_cache: str | None) -> str | None:
    """Where runs keep their exported programs (heron/training/program_cache.py): inside the
    compilation cache that compiles them, so that a new, empty one starts both afresh."""
    return None if compile_cache is None else os.path.join(compile_cache, "heron-programs")


def configure_compile_cache() -> str | None:
    """Turns on JAX's persistent compilation cache unless HERON_COMPILE_CACHE=off; returns
    its directory."""
    import jax

    path = compile_cache_dir()
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _agent_field(algo: str) -> str:
    """The train options' field of an algorithm's config (``world-model``: ``world_model``,
    which tyro writes ``--world-model.*``)."""
    return algo.replace("-", "_")


def _train_args_class(algo: str):
    """The run's fields (flat: --env, --steps, ...) plus the agent config as ``--ALGO.*``."""
    from heron import agents
    from heron.training import RunConfig

    agent_type = agents.config_class(algo)
    field = (_agent_field(algo), agent_type, dataclasses.field(default_factory=agent_type))
    return dataclasses.make_dataclass(
        f"Train{_agent_field(algo).upper()}", [field], bases=(RunConfig,), frozen=True
    )


def _option_names(config_type, prefix: str):
    """(option, field type) of every field of ``config_type`` and its sub-configs, with
    hyphens and with underscores."""
    for field in dataclasses.fields(config_type):
        default = field.default_factory() if callable(field.default_factory) else field.default
        if dataclasses.is_dataclass(default):
            yield from _option_names(type(default), f"{prefix}{field.name}.")
            continue
        for name in {field.name, field.name.replace("_", "-")}:
            yield f"--{prefix}{name}", field.type


def _bool_options(algo: str) -> set[str]:
    """The train options that take a bool, as ``--name`` and ``--ALGO.name``."""
    from heron import agents
    from heron.training import RunConfig

    options = [*_option_names(RunConfig, ""), *_option_names(agents.config_class(algo), f"{algo}.")]
    return {option for option, kind in options if kind in (bool, "bool")}


def _bare_flags_mean_true(argv: list[str], bool_options: set[str]) -> list[str]:
    """``--svg0.prior`` alone means ``--svg0.prior True``: every bool option also reads as a
    flag (tyro's FlagConversionOff, which keeps ``--x True/False`` working, has none)."""
    expanded = []
    for index, token in enumerate(argv):
        expanded.append(token)
        at_end = index + 1 == len(argv) or argv[index + 1].startswith("-")
        if token in bool_options and at_end:
            expanded.append("True")
    return expanded


def _refuse_renamed(algo: str, argv: list[str]) -> None:
    """Options renamed since (Trax's PPO names) are refused with the name that replaced them,
    never reinterpreted."""
    from heron import agents

    renamed = getattr(agents.config_class(algo), "renamed_fields", {})
    for token in argv:
        name = token.split("=", 1)[0]
        if not name.startswith(f"--{algo}."):
            continue
        field = name[len(algo) + 3 :].replace("-", "_")
        if field in renamed:
            raise UsageError(f"{name} is no longer an option: use --{algo}.{renamed[field]}")


# Trax's should_save_checkpoints / should_write_summaries, as flags that turn them off.
NEGATED_FLAGS = {"--no-checkpoints": "--checkpoints=False", "--no-summaries": "--summaries=False"}


def _split_config_option(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the path given to ``--config``, the other arguments)."""
    for index, token in enumerate(argv):
        if token == "--config":
            if index + 1 == len(argv):
                raise UsageError("--config needs a file: a TOML, YAML or JSON run config")
            return argv[index + 1], argv[:index] + argv[index + 2 :]
        if token.startswith("--config="):
            return token.split("=", 1)[1], argv[:index] + argv[index + 1 :]
    return None, argv


def _parse_train(argv: list[str]):
    """(algo, agent config, RunConfig) from ``heron train [ALGO] [--config FILE] [options]``:
    the defaults, then the file's values, then the options given."""
    from heron import agents
    from heron.training import RunConfig

    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0)
    path, rest = _split_config_option(argv)
    algo = rest[0] if rest and not rest[0].startswith("-") else None
    rest = rest[1:] if algo else rest
    agent_config, run = None, RunConfig()
    dataset = _option_value(rest, "--dataset")
    if dataset is not None and path is None and _option_value(rest, "--env") is None:
        rest = [*rest, "--env", _dataset_env(dataset)]
    if path is not None:
        from heron import api

        record = api.read_config_file(path)
        named, agent_config, run = api.configs_from_record(record, path, algo)
        if algo is not None and algo != named:
            raise UsageError(f"{path!r} configures {named}, not {algo}")
        algo, run = named, dataclasses.replace(run, run_dir=None)  # a rerun: a new run dir
    if algo is None:
        raise UsageError("heron train needs an algorithm, e.g. `heron train ppo`")
    config_type = agents.config_class(algo)
    choice = _option_value(rest, "--preset")
    if agent_config is None or choice is not None:  # a preset first, then the file's values
        from heron import presets

        env = _option_value(rest, "--env") or run.env
        offline = _option_value(rest, "--dataset") is not None
        key = presets.resolve(algo, env, choice or presets.AUTO, offline)
        preset_config, preset_run = presets.apply(algo, key, config_type(), RunConfig(env=env))
        if agent_config is None:
            agent_config, run = preset_config, preset_run
        else:
            run = dataclasses.replace(run, preset=preset_run.preset)
    args_class = _train_args_class(algo)
    _refuse_renamed(algo, rest)
    rest = [NEGATED_FLAGS.get(token, token) for token in rest]
    rest = _bare_flags_mean_true(rest, _bool_options(algo))
    default = args_class(
        **{f.name: getattr(run, f.name) for f in dataclasses.fields(RunConfig)},
        **{_agent_field(algo): agent_config},
    )
    args = _cli(
        args_class,
        rest,
        f"heron train {algo}",
        default=default,
        config=(tyro.conf.FlagConversionOff,),
    )
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)}
    return algo, getattr(args, _agent_field(algo)), RunConfig(**{**fields, "preset": run.preset})


def _dataset_env(dataset: str) -> str:
    """The env ``--dataset`` trains for when no ``--env`` is given: the one it was
    collected in, as the dataset records it."""
    from heron.offline.dataset import recorded_env

    env = recorded_env(dataset)
    if env is None:
        raise UsageError(
            f"dataset {dataset!r} does not record the environment it was collected in "
            "(heron collect writes it): give --env ID, the env to evaluate in"
        )
    return env


def _option_value(argv: list[str], option: str) -> str | None:
    """The value given to ``option`` (``--opt V`` or ``--opt=V``), or None."""
    for index, token in enumerate(argv):
        if token == option and index + 1 < len(argv):
            return argv[index + 1]
        if token.startswith(option + "="):
            return token.split("=", 1)[1]
    return None


@dataclasses.dataclass(frozen=True)
class ResumeArgs:
    """Continue a run from its latest checkpoint."""

    resume: str
    """The run directory to continue."""
    steps: int | None = None
    """A new step budget (default: the run's configured steps)."""


def cmd_train(argv: list[str]) -> dict:
    if argv and argv[0].startswith("--resume"):
        args = _cli(ResumeArgs, argv, "heron train")
        if args.steps is not None and args.steps <= 0:
            raise UsageError(f"--steps must be > 0, got {args.steps}")
        _import_env_module_of(args.resume)
        programs = program_cache_dir(configure_compile_cache())
        from heron import api

        return api.resume(args.resume, args.steps, program_cache=programs)
    algo, agent_config, run = _parse_train(argv)
    _envs().import_env_module(run.env_module)
    programs = program_cache_dir(configure_compile_cache())
    from heron import api

    return api.train(api.build(algo, agent_config, run, program_cache=programs))


@dataclasses.dataclass(frozen=True)
class EvalArgs:
    """Evaluate the latest checkpoint of a run."""

    run_dir: tyro.conf.Positional[str]
    """The run directory written by `heron train`."""
    episodes: int = 10
    """Evaluation episodes."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    best: bool = False
    """Evaluate the checkpoint of the best greedy evaluation instead of the latest."""
    video: str | None = None
    """Also write episodes of the policy to this GIF or MP4 (environments with a Gymnasium
    renderer)."""
    video_episodes: int = 1
    """Episodes in the video."""


def cmd_eval(argv: list[str]) -> dict:
    args = _cli(EvalArgs, argv, "heron eval")
    if args.episodes <= 0:
        raise UsageError(f"--episodes must be > 0, got {args.episodes}")
    if not 0 <= args.temperature < float("inf"):
        raise UsageError(f"--temperature must be finite and >= 0, got {args.temperature}")
    _import_env_module_of(args.run_dir)
    configure_compile_cache()
    from heron import api

    result = api.evaluate_run(args.run_dir, args.episodes, args.temperature, best=args.best)
    if args.video is not None:
        from heron.policy import record_video

        if args.video_episodes <= 0:
            raise UsageError(f"--video-episodes must be > 0, got {args.video_episodes}")
        made = record_video(
            args.run_dir, args.video, args.video_episodes, args.temperature, args.best
        )
        result.update(
            video=made["video"], video_frames=made["frames"], video_returns=made["returns"]
        )
    return result


@dataclasses.dataclass(frozen=True)
class PlotArgs:
    """Plot learning curves of one or more runs."""

    run_dirs: tyro.conf.Positional[tuple[str, ...]]
    """Run directories written by `heron train`."""
    out: str = "curves.png"
    """The PNG file to write."""
    temperatures: tuple[float, ...] | None = None
    """Only these evaluation temperatures (default: all)."""


def cmd_plot(argv: list[str]) -> dict:
    args = _cli(PlotArgs, argv, "heron plot")
    from heron.plotting import plot_runs

    return plot_runs(list(args.run_dirs), args.out, args.temperatures)


@dataclasses.dataclass(frozen=True)
class CollectArgs:
    """Roll out the latest checkpoint of a run and write a Minari dataset."""

    run_dir: tyro.conf.Positional[str]
    """The run directory written by `heron train`."""
    episodes: int
    """Whole episodes to collect."""
    out: str
    """The dataset directory to write (must not hold a dataset)."""
    temperature: float | None = None
    """Act at this sampling temperature (0 greedy); default the training behaviour policy."""
    epsilon: float = 0.0
    """Probability of a uniformly random action at each step."""
    seed: int = 0
    """Random seed of the rollouts."""
    best: bool = False
    """Roll out the checkpoint of the best greedy evaluation instead of the latest."""


def cmd_collect(argv: list[str]) -> dict:
    args = _cli(CollectArgs, argv, "heron collect")
    if args.episodes <= 0:
        raise UsageError(f"--episodes must be > 0, got {args.episodes}")
    _import_env_module_of(args.run_dir)
    configure_compile_cache()
    from heron import api

    return api.collect(
        args.run_dir,
        args.episodes,
        args.out,
        args.temperature,
        args.epsilon,
        args.seed,
        best=args.best,
    )


@dataclasses.dataclass(frozen=True)
class CheckEnvArgs:
    """Check an environment as heron will use it: spaces, reset/step signatures, dtypes and
    shapes, NaN/inf, determinism under one seed, speed. One line per problem on stderr, a JSON
    line on stdout; exit status 1 when there are problems."""

    env: tyro.conf.Positional[str]
    """Environment id: gymnax:<id>, gym:<id>, heron:<id> or module.path:Attribute."""
    env_module: str | None = None
    """Python module to import first (its gymnasium.register / heron.envs.register calls)."""
    steps: int = 1000
    """Random steps to take (JAX environments: per environment, 16 of them)."""
    seed: int = 0
    """Seed of the random actions and of the determinism check."""


def cmd_check_env(argv: list[str]) -> dict:
    args = _cli(CheckEnvArgs, argv, "heron check-env")
    if args.steps <= 0:
        raise UsageError(f"--steps must be > 0, got {args.steps}")
    _envs().import_env_module(args.env_module)
    report = _envs().check(args.env, steps=args.steps, seed=args.seed)
    for problem in report.problems:
        print(f"heron: problem: {problem}", file=sys.stderr)
    for note in report.notes:
        print(f"heron: note: {note}", file=sys.stderr)
    return report.summary()


def _envs():
    """heron.envs, imported when a command needs it (it imports JAX)."""
    from heron import envs as module

    return module


def _import_env_module_of(run_dir: str) -> None:
    """Imports the ``env_module`` recorded in ``run_dir``'s config.json, so that the run's
    environment id resolves; a missing or unreadable config.json is reported later."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            module = json.load(f)["run"].get("env_module")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    if module is not None:
        _envs().import_env_module(module)


def describe_os_error(error: OSError) -> str:
    """One line: the path(s), the OS's reason and its errno name, e.g. ``'runs/x': Read-only
    file system (EROFS)``."""
    paths = [os.fsdecode(p) for p in (error.filename, error.filename2) if p is not None]
    text = str(error).strip()
    reason = error.strerror or (text.splitlines()[0] if text else type(error).__name__)
    code = errno.errorcode.get(error.errno) if isinstance(error.errno, int) else None
    where = " -> ".join(repr(p) for p in paths)
    return f"{where + ': ' if where else ''}{reason}{f' ({code})' if code else ''}"


TUNE_OPTIONS = {"--trials": int, "--timeout": float, "--study-dir": str}


def _take_options(argv: list[str], options: dict) -> tuple[dict, list[str]]:
    """The values of ``options`` (``--opt V`` or ``--opt=V``) taken out of ``argv``, and the
    rest."""
    taken, rest, index = {}, [], 0
    while index < len(argv):
        token = argv[index]
        name = token.split("=", 1)[0]
        if name in options:
            if "=" in token:
                text = token.split("=", 1)[1]
            elif index + 1 < len(argv):
                index += 1
                text = argv[index]
            else:
                raise UsageError(f"{name} needs a value")
            try:
                taken[name] = options[name](text)
            except ValueError:
                raise UsageError(f"{name} takes a {options[name].__name__}, got {text!r}") from None
        else:
            rest.append(token)
        index += 1
    return taken, rest


def cmd_tune(argv: list[str]) -> dict:
    """``heron tune ALGO --env ID --trials N [--timeout S] [--study-dir DIR] [train options]``."""
    if argv and argv[0] in ("-h", "--help"):
        print(TUNE_USAGE)
        raise SystemExit(0)
    taken, rest = _take_options(argv, TUNE_OPTIONS)
    if "--trials" not in taken:
        raise UsageError("heron tune needs --trials N, the number of trials of the study")
    algo, agent_config, run = _parse_train(rest)
    _envs().import_env_module(run.env_module)
    programs = program_cache_dir(configure_compile_cache())
    from heron import tune

    study_dir = taken.get("--study-dir") or os.path.join(
        "tune", f"{algo}_{run.env.replace(':', '_').replace('/', '_')}"
    )
    config = tune.TuneConfig(taken["--trials"], taken.get("--timeout"), study_dir, run.seed)
    return tune.tune(algo, agent_config, run, config, program_cache=programs)


TUNE_USAGE = """usage: heron tune ALGO --env ID --trials N [--timeout S] [--study-dir DIR] [...]
(... any option of heron train ALGO.) Optuna (TPE, a median pruner on the greedy evaluations)
over heron/presets/ALGO.search.toml; each trial a run directory in DIR (default
tune/ALGO_ENV), the study in DIR/study.db (the same command resumes it), the best trial as a
preset entry in DIR/best_preset.toml."""


COMMANDS = {
    "train": cmd_train,
    "tune": cmd_tune,
    "eval": cmd_eval,
    "plot": cmd_plot,
    "collect": cmd_collect,
    "check-env": cmd_check_env,
}


def _fail(message: str, status: int, ending_process: bool) -> int:
    """Prints heron's one error line. When the process ends next (``heron`` on the command
    line), what background threads and exit handlers report after it (a TensorBoard writer or
    a checkpoint writer meeting the same full disk, say) would bury that line under their
    tracebacks and log records, so they are not printed."""
    print(f"heron: error: {message}", file=sys.stderr, flush=True)
    if ending_process:
        sys.unraisablehook = lambda unraisable: None
        threading.excepthook = lambda args: None
        logging.disable(logging.CRITICAL)
    return status


def _environment_failure():
    """What a Gymnasium environment raised inside a compiled program (which failed with a
    generic runtime error in its place), if one did: ``heron eval`` and ``collect`` say it
    as ``heron train`` does."""
    gym_env = sys.modules.get("heron.envs.gym_env")
    return gym_env.GymEnv.take_failure() if gym_env is not None else None


def main(argv: list[str] | None = None) -> int:
    ending_process = argv is None  # the `heron` command, not a call from Python
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(
            f"heron: error: unknown command {command!r}; commands: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    try:
        summary = COMMANDS[command](rest)
    except ValueError as error:  # every user-caused error is a ValueError subclass
        return _fail(str(error), 2, ending_process)
    except RuntimeError as error:  # training could not go on (e.g. a non-finite loss)
        return _fail(str(_environment_failure() or error), 1, ending_process)
    except OSError as error:  # read-only or full disk, a file where a directory should be, ...
        return _fail(describe_os_error(error), 1, ending_process)
    except KeyboardInterrupt as interrupt:
        number = getattr(interrupt, "signal_number", None)  # a run that saved, then stopped
        if number is not None:
            print(f"heron: stopped: {interrupt}", file=sys.stderr)
            return 128 + number
        print("heron: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(summary), flush=True)
    return 0 if summary.get("ok", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
