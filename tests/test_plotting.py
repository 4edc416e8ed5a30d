"""heron.plotting: learning-curve PNGs from synthetic run directories."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from matplotlib.image import imread

from heron.plotting import (
    PlotError,
    aggregate_curves,
    is_offline,
    load_eval_records,
    plot_figure,
    plot_runs,
    run_label,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEPS = (1000, 2000, 3000, 4000)


def eval_line(step, seed, temperature, mean, std=1.0, wall=None):
    return {
        "kind": "eval",
        "step": step,
        "wall_s": step / 1000 if wall is None else wall,
        "seed": seed,
        "temperature": temperature,
        "return_mean": mean,
        "return_std": std,
        "episodes": 8,
    }


def write_run(path, records, config=None, raw_lines=()):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
        for line in raw_lines:
            f.write(line)
    if config is not None:
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)
    return str(path)


def train_line(step):
    return {"kind": "train", "step": step, "wall_s": step / 1000, "seed": 0, "loss": 0.5}


@pytest.fixture
def one_seed_run(tmp_path):
    """1 seed, temperatures 1.0, 0.5, 0.0, four evaluation steps, with training lines."""
    records = []
    for step in STEPS:
        records.append(train_line(step))
        for temperature in (1.0, 0.5, 0.0):
            records.append(eval_line(step, 0, temperature, step / 10 * (1 + temperature)))
    config = {"algo": "ppo", "run": {"env": "gymnax:CartPole-v1", "seed": 0}}
    return write_run(tmp_path / "ppo_cartpole", records, config)


@pytest.fixture
def three_seed_run(tmp_path):
    """3 seeds, temperatures 1.0 and 0.0, four evaluation steps, no config.json."""
    records = [
        eval_line(step, seed, temperature, step / 100 + seed, wall=step / 1000 + seed)
        for step in STEPS
        for seed in range(3)
        for temperature in (1.0, 0.0)
    ]
    return write_run(tmp_path / "dqn_seeds", records)


def assert_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000
    assert imread(path).shape == (450, 1200, 4)


def test_plot_runs_writes_png_and_counts(tmp_path, one_seed_run, three_seed_run):
    out = str(tmp_path / "curves.png")
    summary = plot_runs([one_seed_run, three_seed_run], out)
    assert summary == {"out": out, "runs": 2, "lines": 3 + 2, "points": 5 * len(STEPS)}
    assert_png(out)
    json.dumps(summary)


def test_plot_runs_temperature_filter(tmp_path, one_seed_run, three_seed_run):
    out = str(tmp_path / "greedy.png")
    summary = plot_runs([one_seed_run, three_seed_run], out, temperatures=[0.0])
    assert (summary["lines"], summary["points"]) == (2, 2 * len(STEPS))
    summary = plot_runs([one_seed_run, three_seed_run], out, temperatures=[0.5])
    assert (summary["lines"], summary["points"]) == (1, len(STEPS))
    assert_png(out)


def test_plot_runs_accepts_a_single_path_string(tmp_path, one_seed_run):
    summary = plot_runs(one_seed_run, str(tmp_path / "one.png"))
    assert (summary["runs"], summary["lines"]) == (1, 3)


def test_plot_runs_leaves_pyplot_alone(tmp_path, one_seed_run):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plot_runs([one_seed_run], str(tmp_path / "p.png"))
    assert plt.get_fignums() == before


def test_null_returns_are_not_points(tmp_path):
    records = [eval_line(step, 0, 0.0, None if step == 2000 else 1.0) for step in STEPS]
    run = write_run(tmp_path / "nulls", records)
    summary = plot_runs([run], str(tmp_path / "n.png"))
    assert (summary["lines"], summary["points"]) == (1, len(STEPS) - 1)


def test_aggregate_over_seeds():
    records = [
        eval_line(10, 0, 0.0, 1.0, wall=1.0),
        eval_line(10, 1, 0.0, 3.0, wall=2.0),
        eval_line(10, 2, 0.0, 8.0, wall=3.0),
        eval_line(20, 0, 0.0, 5.0, wall=4.0),
        eval_line(20, 1, 0.0, None, wall=6.0),
        eval_line(20, 2, 0.0, 7.0, wall=8.0),
        eval_line(30, 1, 0.0, 2.0, wall=9.0),  # seeds 0 and 2 have no line at step 30
        eval_line(10, 0, 1.0, 0.0),
    ]
    greedy_curve, sampled = aggregate_curves(records)
    assert (greedy_curve.temperature, sampled.temperature) == (0.0, 1.0)
    assert greedy_curve.seeds == 3
    np.testing.assert_array_equal(greedy_curve.steps, [10, 20, 30])
    np.testing.assert_allclose(greedy_curve.mean, [4.0, 6.0, 2.0])
    np.testing.assert_allclose(greedy_curve.low, [1.0, 5.0, 2.0])
    np.testing.assert_allclose(greedy_curve.high, [8.0, 7.0, 2.0])
    np.testing.assert_allclose(greedy_curve.wall_s, [2.0, 6.0, 9.0])
    assert greedy_curve.points == 3
    assert sampled.seeds == 1


def test_aggregate_single_seed_band_is_episode_std():
    records = [
        eval_line(10, 0, 0.0, 4.0, std=1.5),
        eval_line(20, 0, 0.0, 6.0, std=None),
        eval_line(30, 0, 0.0, None, std=2.0),
    ]
    (curve,) = aggregate_curves(records)
    assert curve.seeds == 1
    np.testing.assert_allclose(curve.mean, [4.0, 6.0, np.nan])
    np.testing.assert_allclose(curve.low, [2.5, np.nan, np.nan])
    np.testing.assert_allclose(curve.high, [5.5, np.nan, np.nan])
    assert curve.points == 2


def test_aggregate_last_duplicate_wins():
    records = [eval_line(10, 0, 0.0, 1.0), eval_line(10, 0, 0.0, 9.0)]
    (curve,) = aggregate_curves(records)
    np.testing.assert_allclose(curve.mean, [9.0])


def test_load_eval_records_skips_train_lines(one_seed_run):
    records = load_eval_records(one_seed_run)
    assert len(records) == 3 * len(STEPS)
    assert all(r["kind"] == "eval" for r in records)
    assert records[0] == eval_line(1000, 0, 1.0, 200.0)


def test_load_eval_records_ignores_unterminated_last_line(tmp_path):
    run = write_run(tmp_path / "live", [eval_line(10, 0, 0.0, 1.0)], raw_lines=['{"kind": "ev'])
    assert len(load_eval_records(run)) == 1


def test_run_label(one_seed_run, three_seed_run, tmp_path):
    assert run_label(one_seed_run) == "ppo_cartpole (ppo, gymnax:CartPole-v1)"
    assert run_label(three_seed_run) == "dqn_seeds"
    assert run_label(three_seed_run + os.sep) == "dqn_seeds"
    broken = write_run(tmp_path / "broken", [])
    with open(os.path.join(broken, "config.json"), "w") as f:
        f.write("{not json")
    assert run_label(broken) == "broken"


def test_error_missing_run_dir(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(PlotError, match="does not exist") as info:
        plot_runs([missing], str(tmp_path / "x.png"))
    assert missing in str(info.value)


def test_error_run_dir_is_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(PlotError, match="is not a directory"):
        load_eval_records(str(path))


def test_error_no_metrics(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PlotError, match="has no metrics.jsonl: not a heron run dir") as info:
        plot_runs([str(empty)], str(tmp_path / "x.png"))
    assert str(empty) in str(info.value)


def test_error_no_eval_lines(tmp_path):
    run = write_run(tmp_path / "young", [train_line(100), train_line(200)])
    with pytest.raises(PlotError, match="has no evaluation lines yet") as info:
        plot_runs([run], str(tmp_path / "x.png"))
    assert run in str(info.value)


@pytest.mark.parametrize(
    "bad_line, hint",
    [
        ("{not json}\n", "malformed line"),
        ("[1, 2]\n", "expected a JSON object"),
        (json.dumps({**eval_line(10, 0, 0.0, 1.0), "step": "ten"}) + "\n", "'step'"),
        (json.dumps({**eval_line(10, 0, 0.0, 1.0), "temperature": None}) + "\n", "'temperature'"),
        (json.dumps({**eval_line(10, 0, 0.0, 1.0), "return_mean": "high"}) + "\n", "return_mean"),
        (
            json.dumps({k: v for k, v in eval_line(10, 0, 0.0, 1.0).items() if k != "return_mean"})
            + "\n",
            "'return_mean' is missing",
        ),
    ],
)
def test_error_malformed_line_names_line_number(tmp_path, bad_line, hint):
    good = [train_line(10), eval_line(10, 0, 0.0, 1.0)]
    run = write_run(tmp_path / "bad", good, raw_lines=[bad_line, json.dumps(good[1]) + "\n"])
    with pytest.raises(PlotError, match=hint) as info:
        plot_runs([run], str(tmp_path / "x.png"))
    message = str(info.value)
    assert os.path.join(run, "metrics.jsonl") + ":3:" in message
    assert "\n" not in message


def test_error_out_not_png(tmp_path, one_seed_run):
    out = str(tmp_path / "curves.svg")
    with pytest.raises(PlotError, match="must end in .png") as info:
        plot_runs([one_seed_run], out)
    assert out in str(info.value)


def test_error_out_parent_missing(tmp_path, one_seed_run):
    out = str(tmp_path / "no" / "such" / "curves.png")
    with pytest.raises(PlotError, match="does not exist") as info:
        plot_runs([one_seed_run], out)
    assert str(tmp_path / "no" / "such") in str(info.value)
    assert not os.path.exists(out)


def test_error_no_run_dirs(tmp_path):
    with pytest.raises(PlotError, match="no run dirs given"):
        plot_runs([], str(tmp_path / "x.png"))


def test_error_temperature_filter_matches_nothing(tmp_path, one_seed_run, three_seed_run):
    out = str(tmp_path / "x.png")
    with pytest.raises(PlotError, match="temperature") as info:
        plot_runs([one_seed_run, three_seed_run], out, temperatures=[0.25, 2.0])
    message = str(info.value)
    assert "0.25, 2" in message
    assert "the runs have 0, 0.5, 1" in message
    assert not os.path.exists(out)


# --------------------------------------------------------------------------- readability


def long_run(path, evaluations=200, config=None):
    """One seed, temperatures 1.0 and 0.0, ``evaluations`` evaluation steps."""
    records = [
        eval_line(1000 * (k + 1), 0, temperature, float(k))
        for k in range(evaluations)
        for temperature in (1.0, 0.0)
    ]
    return write_run(path, records, config)


def lines_by_label(axes) -> dict:
    return {line.get_label(): line for line in axes.get_lines()}


def test_runs_of_different_lengths_stay_readable(tmp_path, one_seed_run):
    """A colour per run, a line style per temperature, a legend for each, and no markers on
    lines too long to carry them (they covered the 200-point line like a thick band)."""
    long = long_run(tmp_path / "long")
    figure, runs = plot_figure([one_seed_run, long])
    by_steps, by_wall = figure.axes
    lines = lines_by_label(by_steps)
    short_label, long_label = runs[0][0], runs[1][0]
    short = [lines[f"{short_label} T={t}"] for t in ("0", "0.5", "1")]
    longer = [lines[f"{long_label} T={t}"] for t in ("0", "1")]
    assert len({line.get_color() for line in short}) == 1
    assert len({line.get_color() for line in longer}) == 1
    assert short[0].get_color() != longer[0].get_color()
    assert short[0].get_linestyle() == longer[0].get_linestyle()  # T=0 looks the same
    assert short[2].get_linestyle() == longer[1].get_linestyle()  # and so does T=1
    assert len({line.get_linestyle() for line in short}) == 3
    assert all(line.get_marker() == "o" for line in short)  # 4 points: markers help
    assert all(line.get_marker() in (None, "None", "") for line in longer)  # 200: none
    run_legend, style_legend = by_steps.get_legend(), by_wall.get_legend()
    assert [t.get_text() for t in run_legend.get_texts()] == [short_label, long_label]
    assert [t.get_text() for t in style_legend.get_texts()] == ["T=0", "T=0.5", "T=1"]
    assert by_steps.get_xlabel() == "environment steps"


def test_more_runs_than_ten_keep_distinct_colours(tmp_path):
    runs = [long_run(tmp_path / f"run{k}", evaluations=3) for k in range(12)]
    figure, _ = plot_figure(runs, temperatures=[0.0])
    colours = {
        tuple(np.round(np.atleast_1d(line.get_color()), 6)) for line in figure.axes[0].get_lines()
    }
    assert len(colours) == 12


@pytest.mark.parametrize(
    "offline, label",
    [
        ((True,), "gradient updates (offline)"),
        ((True, True), "gradient updates (offline)"),
        ((False, True), "environment steps (online runs) / gradient updates (offline runs)"),
        ((False,), "environment steps"),
    ],
)
def test_offline_runs_count_gradient_updates(tmp_path, offline, label):
    runs = []
    for k, from_data in enumerate(offline):
        config = {"algo": "crr", "run": {"env": "gymnax:Pendulum-v1"}}
        if from_data:
            config["dataset"] = {"episodes": 10, "steps": 2000}
            config["run"]["dataset"] = "data/pendulum"
        runs.append(long_run(tmp_path / f"run{k}", evaluations=3, config=config))
    assert [is_offline(r) for r in runs] == list(offline)
    figure, _ = plot_figure(runs)
    assert figure.axes[0].get_xlabel() == label
    assert figure.axes[1].get_xlabel() == "wall-clock seconds"
