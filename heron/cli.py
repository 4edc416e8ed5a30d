"""``heron train | eval | plot | collect``: the command line.

    heron train ALGO [--env ID] [--steps N] [--seed S] [--num-envs E] [--run-dir DIR]
                     [--eval-every-n I] [--n-evals N] [--eval-temperatures T ...]
                     [--save-every-n I] [--dataset DATASET] [--ALGO.FIELD VALUE ...]
    heron eval RUN_DIR [--episodes N] [--temperature T]
    heron collect RUN_DIR --episodes N --out DATASET [--temperature T] [--epsilon E]

Errors a user can cause print one line on stderr and exit with status 2. JAX's persistent
compilation cache lives in ``$XDG_CACHE_HOME/heron/jax`` (default ~/.cache/heron/jax);
``HERON_COMPILE_CACHE=DIR`` moves it and ``HERON_COMPILE_CACHE=off`` disables it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys

import tyro

USAGE = """usage: heron train ALGO [options] [--ALGO.FIELD VALUE ...]
       heron train --resume RUN_DIR [--steps N]
       heron eval RUN_DIR [--episodes N] [--temperature T]
       heron plot RUN_DIR [RUN_DIR ...] --out FILE.png [--temperatures T ...]
       heron collect RUN_DIR --episodes N --out DATASET [--temperature T] [--epsilon E]
run `heron train ALGO --help` for every option of an algorithm"""


class UsageError(ValueError):
    """A command line heron cannot run."""


def _one_line(box: str) -> str:
    """The message inside tyro's error box (its first section), on one line."""
    lines = [line.strip().strip("│╭╮╰╯").strip() for line in box.splitlines()]
    message = []
    for line in lines[1:]:  # lines[0] is the box's title
        if not line or set(line) <= set("─ "):
            break
        message.append(line)
    return " ".join(message) or " ".join(line for line in lines if line.strip("─ "))


def _cli(config_type, argv: list[str], prog: str, **kwargs):
    """``tyro.cli`` whose parse errors are heron's one-line UsageError (tyro prints a box);
    ``--help`` prints and exits as usual."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(config_type, args=argv, prog=prog, **kwargs)
    except SystemExit as exit:
        if not exit.code:
            sys.stderr.write(captured.getvalue())
            raise
        raise UsageError(f"{_one_line(captured.getvalue())} (see `{prog} --help`)") from None


def configure_compile_cache() -> str | None:
    """Turns on JAX's persistent compilation cache unless HERON_COMPILE_CACHE=off."""
    import jax

    setting = os.environ.get("HERON_COMPILE_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no", "none"):
        return None
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = setting or os.path.join(cache_home, "heron", "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _unchecked(config_type):
    """The config class without its validation, so that tyro only parses; heron validates
    afterwards and reports a bad value in one line instead of tyro's help box."""
    return type(config_type.__name__, (config_type,), {"__post_init__": lambda self: None})


def _checked(config_type, parsed):
    return config_type(**{f.name: getattr(parsed, f.name) for f in dataclasses.fields(config_type)})


def _train_args_class(algo: str):
    """The run's fields (flat: --env, --steps, ...) plus the agent config as ``--ALGO.*``."""
    from heron import agents
    from heron.training import RunConfig

    agent_type = _unchecked(agents.config_class(algo))
    field = (algo, agent_type, dataclasses.field(default_factory=agent_type))
    return dataclasses.make_dataclass(
        f"Train{algo.upper()}", [field], bases=(_unchecked(RunConfig),), frozen=True
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


def _parse_train(argv: list[str]):
    from heron.training import RunConfig

    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        raise UsageError("heron train needs an algorithm, e.g. `heron train ppo`")
    algo, rest = argv[0], argv[1:]
    args_class = _train_args_class(algo)
    _refuse_renamed(algo, rest)
    rest = _bare_flags_mean_true(rest, _bool_options(algo))
    args = _cli(args_class, rest, f"heron train {algo}", config=(tyro.conf.FlagConversionOff,))
    from heron import agents

    agent_config = _checked(agents.config_class(algo), getattr(args, algo))
    return algo, agent_config, _checked(RunConfig, args)


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
        configure_compile_cache()
        from heron import api

        return api.resume(args.resume, args.steps)
    algo, agent_config, run = _parse_train(argv)
    configure_compile_cache()
    from heron import api

    return api.train(api.build(algo, agent_config, run))


@dataclasses.dataclass(frozen=True)
class EvalArgs:
    """Evaluate the latest checkpoint of a run."""

    run_dir: tyro.conf.Positional[str]
    """The run directory written by `heron train`."""
    episodes: int = 10
    """Evaluation episodes."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""


def cmd_eval(argv: list[str]) -> dict:
    args = _cli(EvalArgs, argv, "heron eval")
    if args.episodes <= 0:
        raise UsageError(f"--episodes must be > 0, got {args.episodes}")
    if not 0 <= args.temperature < float("inf"):
        raise UsageError(f"--temperature must be finite and >= 0, got {args.temperature}")
    configure_compile_cache()
    from heron import api

    return api.evaluate_run(args.run_dir, args.episodes, args.temperature)


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


def cmd_collect(argv: list[str]) -> dict:
    args = _cli(CollectArgs, argv, "heron collect")
    if args.episodes <= 0:
        raise UsageError(f"--episodes must be > 0, got {args.episodes}")
    configure_compile_cache()
    from heron import api

    return api.collect(
        args.run_dir, args.episodes, args.out, args.temperature, args.epsilon, args.seed
    )


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "collect": cmd_collect}


def main(argv: list[str] | None = None) -> int:
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
        print(f"heron: error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # training could not go on (e.g. a non-finite loss)
        print(f"heron: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("heron: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
