"""Learning curves from run directories: evaluation return against steps and wall-clock time.

A run directory holds ``metrics.jsonl``; its ``"kind": "eval"`` lines carry, per evaluation
step, seed and policy temperature, the mean (and std) return over the evaluation episodes
(or, where a line names its ``quantity``, that: a world model's held-out next-token
accuracy).
``plot_runs`` draws one line per (run, temperature): the mean over seeds at each step, with a
band that shows the spread between seeds (or across episodes when the run has one seed). Each
run has one colour and each temperature one line style, with a legend for each; lines of more
than ``MAX_MARKERS`` points have no markers, so long runs stay readable beside short ones. An
offline run (its config.json has a ``dataset``) counts gradient updates, not environment
steps, and the x-axis says so.

Only numpy and matplotlib's Agg canvas are used, never pyplot or jax, so plotting is cheap to
import and leaves a caller's pyplot state and backend untouched.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
MAX_MARKERS = 25  # a line with more points is drawn without markers
_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)))


class PlotError(ValueError):
    """A run directory, metrics file or plot request that cannot be drawn."""


@dataclass(frozen=True)
class Curve:
    """One temperature of one run, aggregated over seeds; arrays share the ``steps`` axis.

    ``low``/``high`` bound the band: the min and max over seeds when there are two or more,
    otherwise ``mean`` ± the episodes' ``return_std``. Missing values are NaN.
    """

    temperature: float
    steps: np.ndarray
    wall_s: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int

    @property
    def points(self) -> int:
        return int(np.isfinite(self.mean).sum())


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _eval_problem(record: dict) -> str | None:
    """Why an eval record is unusable, or None when it is fine."""
    for key in ("step", "seed"):
        if not _is_int(record.get(key)):
            return f"{key!r} must be an integer, got {record.get(key)!r}"
    for key in ("temperature", "wall_s"):
        value = record.get(key)
        if not (_is_number(value) and math.isfinite(value)):
            return f"{key!r} must be a finite number, got {value!r}"
    if "return_mean" not in record:
        return "'return_mean' is missing"
    for key in ("return_mean", "return_std"):
        value = record.get(key)
        if value is not None and not _is_number(value):
            return f"{key!r} must be a number or null, got {value!r}"
    return None


def _parse_line(raw: bytes) -> dict:
    record = json.loads(raw.decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    return record


def load_eval_records(run_dir: str) -> list[dict]:
    """The ``"kind": "eval"`` records of ``run_dir``'s metrics.jsonl, in file order.

    Records are returned as written (``return_mean``/``return_std`` may be None); training
    lines are skipped. Raises PlotError for a missing directory or file, a malformed line, or
    a file without evaluation lines.
    """
    if not os.path.exists(run_dir):
        raise PlotError(f"run dir {run_dir!r} does not exist")
    if not os.path.isdir(run_dir):
        raise PlotError(f"run dir {run_dir!r} is not a directory")
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise PlotError(f"run dir {run_dir!r} has no {METRICS_FILE}: not a heron run dir")
    with open(path, "rb") as f:
        lines = f.readlines()
    records = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = _parse_line(raw)
        except ValueError as error:
            # A live run may be mid-write: an unterminated last line is not yet a record.
            if number == len(lines) and not raw.endswith(b"\n"):
                break
            reason = str(error).splitlines()[0]
            raise PlotError(f"{path}:{number}: malformed line: {reason}") from error
        if record.get("kind") != "eval":
            continue
        problem = _eval_problem(record)
        if problem is not None:
            raise PlotError(f"{path}:{number}: malformed eval line: {problem}")
        records.append(record)
    if not records:
        raise PlotError(f"{path!r} has no evaluation lines yet")
    return records


def _read_config(run_dir: str) -> dict:
    """config.json of ``run_dir`` as a dict; empty when missing or unreadable."""
    try:
        with open(os.path.join(run_dir, CONFIG_FILE)) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def is_offline(run_dir: str) -> bool:
    """Whether ``run_dir`` trained from a dataset (its steps are gradient updates)."""
    config = _read_config(run_dir)
    run = config.get("run")
    return config.get("dataset") is not None or (
        isinstance(run, dict) and run.get("dataset") is not None
    )


def run_label(run_dir: str) -> str:
    """The folder name, with the algorithm and environment from config.json when readable."""
    name = os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
    config = _read_config(run_dir)
    if not config:
        return name
    run = config.get("run")
    details = [config.get("algo"), run.get("env") if isinstance(run, dict) else None]
    details = [str(d) for d in details if d]
    return f"{name} ({', '.join(details)})" if details else name


def _as_float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _finite_mean(values: np.ndarray) -> np.ndarray:
    """Mean over axis 0 of the finite entries; NaN where a column has none."""
    finite = np.isfinite(values)
    count = finite.sum(axis=0)
    total = np.where(finite, values, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _finite_extreme(values: np.ndarray, reduce: np.ufunc, fill: float) -> np.ndarray:
    finite = np.isfinite(values)
    extreme = reduce.reduce(np.where(finite, values, fill), axis=0)
    return np.where(finite.any(axis=0), extreme, np.nan)


def _curve(temperature: float, table: dict[int, dict[int, dict]]) -> Curve:
    """Aggregates ``table[seed][step] -> record`` for one temperature."""
    seeds = sorted(table)
    steps = sorted({step for by_step in table.values() for step in by_step})

    def grid(key: str) -> np.ndarray:
        values = np.full((len(seeds), len(steps)), np.nan)
        for row, seed in enumerate(seeds):
            for column, step in enumerate(steps):
                if step in table[seed]:
                    values[row, column] = _as_float(table[seed][step].get(key))
        return values

    returns = grid("return_mean")
    mean = _finite_mean(returns)
    if len(seeds) >= 2:
        low = _finite_extreme(returns, np.minimum, math.inf)
        high = _finite_extreme(returns, np.maximum, -math.inf)
    else:
        std = grid("return_std")[0]
        low, high = mean - std, mean + std
    return Curve(
        temperature, np.array(steps), _finite_mean(grid("wall_s")), mean, low, high, len(seeds)
    )


def aggregate_curves(records: Sequence[dict]) -> list[Curve]:
    """One Curve per temperature (ascending) from a run's eval records.

    At each step the mean is taken over the seeds with a finite return there. When a
    (temperature, seed, step) appears more than once, as after a resumed run, the last wins.
    """
    tables: dict[float, dict[int, dict[int, dict]]] = {}
    for record in records:
        by_seed = tables.setdefault(float(record["temperature"]), {})
        by_seed.setdefault(record["seed"], {})[record["step"]] = record
    return [_curve(t, tables[t]) for t in sorted(tables)]


def _matches(temperature: float, wanted: Sequence[float]) -> bool:
    return any(math.isclose(temperature, w, rel_tol=1e-9, abs_tol=1e-9) for w in wanted)


def _format_temperature(temperature: float) -> str:
    return f"{temperature:g}"


def _select(
    runs: list[tuple[str, list[Curve]]], temperatures: Sequence[float] | None
) -> list[tuple[str, list[Curve]]]:
    if temperatures is None:
        return runs
    wanted = [float(t) for t in temperatures]
    selected = [
        (label, [c for c in curves if _matches(c.temperature, wanted)]) for label, curves in runs
    ]
    if not any(curves for _, curves in selected):
        present = sorted({c.temperature for _, curves in runs for c in curves})
        raise PlotError(
            f"no evaluation lines at temperature(s) "
            f"{', '.join(map(_format_temperature, wanted)) or '(none given)'}; "
            f"the runs have {', '.join(map(_format_temperature, present))}"
        )
    return selected


def _run_colors(count: int) -> list:
    """One distinct colour per run: tab10, tab20, then evenly spaced viridis."""
    from matplotlib import colormaps

    if count <= 10:
        return [f"C{i}" for i in range(count)]
    if count <= 20:
        return [colormaps["tab20"](i) for i in range(count)]
    return [colormaps["viridis"](i / (count - 1)) for i in range(count)]


def x_label(offline: Sequence[bool]) -> str:
    """The step axis' label: environment steps, gradient updates (offline runs) or both."""
    if all(offline):
        return "gradient updates (offline)"
    if any(offline):
        return "environment steps (online runs) / gradient updates (offline runs)"
    return "environment steps"


def _draw(
    figure: Figure,
    runs: list[tuple[str, list[Curve]]],
    steps_label: str,
    y_label: str = "evaluation return",
) -> None:
    """Two panels sharing the return axis; a colour per run, a line style per temperature,
    a legend for each."""
    from matplotlib.lines import Line2D

    by_steps, by_wall = figure.subplots(1, 2, sharey=True)
    colors = _run_colors(len(runs))
    temperatures = sorted({c.temperature for _, curves in runs for c in curves})
    styles = {t: _LINESTYLES[i % len(_LINESTYLES)] for i, t in enumerate(temperatures)}
    for color, (label, curves) in zip(colors, runs, strict=True):
        for curve in curves:
            name = f"{label} T={_format_temperature(curve.temperature)}"
            marker = "o" if curve.points <= MAX_MARKERS else None
            for axes, x in ((by_steps, curve.steps), (by_wall, curve.wall_s)):
                axes.plot(
                    x,
                    curve.mean,
                    linestyle=styles[curve.temperature],
                    color=color,
                    marker=marker,
                    markersize=3,
                    label=name,
                )
                band = np.isfinite(curve.low) & np.isfinite(curve.high)
                axes.fill_between(x, curve.low, curve.high, where=band, color=color, alpha=0.15)
    by_steps.set_xlabel(steps_label)
    by_wall.set_xlabel("wall-clock seconds")
    by_steps.set_ylabel(y_label)
    for axes in (by_steps, by_wall):
        axes.grid(True, alpha=0.3)
    run_handles = [
        Line2D([], [], color=color, label=label)
        for color, (label, _) in zip(colors, runs, strict=True)
    ]
    style_handles = [
        Line2D([], [], color="0.2", linestyle=styles[t], label=f"T={_format_temperature(t)}")
        for t in temperatures
    ]
    by_steps.legend(handles=run_handles, fontsize="small", title="run")
    by_wall.legend(handles=style_handles, fontsize="small", title="temperature")
    if y_label == "evaluation return":
        figure.suptitle("Evaluation return (mean over seeds; T=0 is greedy)")
    else:
        figure.suptitle(f"{y_label[:1].upper()}{y_label[1:]} (mean over seeds)")


def _check_out(out: str) -> None:
    if not out.lower().endswith(".png"):
        raise PlotError(f"output {out!r} must end in .png")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise PlotError(f"output directory {parent!r} for {out!r} does not exist")


def plot_runs(
    run_dirs: Sequence[str], out: str, temperatures: Sequence[float] | None = None
) -> dict:
    """Writes a PNG of the runs' evaluation curves to ``out``; returns a summary.

    ``temperatures`` keeps only those policy temperatures (default: all). The summary is
    ``{"out", "runs", "lines", "points"}``: lines drawn, and finite (step, return) points
    over all lines.
    """
    if isinstance(run_dirs, str):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise PlotError("no run dirs given")
    _check_out(out)
    figure, runs = plot_figure(run_dirs, temperatures)
    figure.savefig(out)
    curves = [c for _, run_curves in runs for c in run_curves]
    return {
        "out": out,
        "runs": len(run_dirs),
        "lines": len(curves),
        "points": sum(c.points for c in curves),
    }


def plot_figure(
    run_dirs: Sequence[str], temperatures: Sequence[float] | None = None
) -> tuple[Figure, list[tuple[str, list[Curve]]]]:
    """The figure ``plot_runs`` saves, and the (label, curves) it draws per run."""
    if isinstance(run_dirs, str):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise PlotError("no run dirs given")
    records = [load_eval_records(d) for d in run_dirs]
    runs = [(run_label(d), aggregate_curves(r)) for d, r in zip(run_dirs, records, strict=True)]
    runs = _select(runs, temperatures)
    # what the eval lines measure: a return, or what they name (a world model's accuracy)
    quantities = {r.get("quantity", "evaluation return") for rs in records for r in rs}
    y_label = quantities.pop() if len(quantities) == 1 else "evaluation return (or as named)"
    figure = Figure(figsize=(12, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    _draw(figure, runs, x_label([is_offline(d) for d in run_dirs]), y_label)
    return figure, runs
