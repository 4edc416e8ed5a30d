"""Controllers (Trax's): multipliers on scheduled hyperparameters decided from the metrics
history at each evaluation, logged, saved in checkpoints and restored exactly on resume."""

import json

import jax
import numpy as np
import pytest
import small_ppo
from conftest import train_until_checkpoint
from small_ppo import PPO, build

from heron import api
from heron.configs import ConfigError
from heron.training.controllers import Plateau, parse_controller


def _evals(values, temperature=0.0):
    return [{"kind": "eval", "temperature": temperature, "return_mean": v} for v in values]


def _reference(values, factor, patience):
    best, since, plateaus = -np.inf, 0, 0
    for v in values:
        if v > best:
            best, since = v, 0
        else:
            since += 1
            if since == patience:
                plateaus, since = plateaus + 1, 0
    return factor**plateaus


@pytest.mark.parametrize(
    "values", [[1, 2, 3], [3, 2, 1], [1, 1, 1, 1, 1], [1, 5, 2, 2, 2, 6, 1, 1], []]
)
def test_plateau_against_a_plain_reference(values):
    controller = Plateau("learning_rate", 0.5, 2)
    history = _evals(values) + _evals([100.0] * len(values), temperature=1.0)  # not greedy
    assert controller(history) == {"learning_rate": _reference(values, 0.5, 2)}


def test_controller_strings_are_parsed_or_refused_by_name():
    assert parse_controller("plateau(learning_rate, 0.5, 3)") == Plateau("learning_rate", 0.5, 3)
    with pytest.raises(ConfigError, match="unknown controller 'cosine.*plateau\\(NAME"):
        parse_controller("cosine(1)")
    with pytest.raises(ConfigError, match="expected plateau\\(NAME, FACTOR, PATIENCE\\)"):
        parse_controller("plateau(learning_rate)")
    with pytest.raises(ConfigError, match="patience must be >= 1"):
        parse_controller("plateau(learning_rate, 0.5, 0)")


def _run(**overrides):
    settings = dict(steps=2048, eval_every_n=2, controller="plateau(learning_rate, 0.5, 1)")
    return small_ppo.run(**{**settings, **overrides})


def _lines(run_dir):
    return [json.loads(x) for x in open(f"{run_dir}/metrics.jsonl")]


def test_controls_are_logged_applied_and_resumed_exactly(tmp_path, monkeypatch):
    straight = api.train(build("ppo", PPO, _run()), str(tmp_path / "a"))
    lines = _lines(tmp_path / "a")
    controls = [x for x in lines if x["kind"] == "control"]
    greedy = [x["return_mean"] for x in lines if x["kind"] == "eval"]
    expected = _reference(greedy, 0.5, 1)
    assert controls and controls[-1]["values"] == {"learning_rate": expected}
    state = api.load_run(str(tmp_path / "a"))[2]
    assert float(state.agent_state.controls["learning_rate"][0]) == expected

    setup = build("ppo", PPO, _run())
    train_until_checkpoint(monkeypatch, setup, tmp_path / "b", kill_at=16)
    resumed = small_ppo.resume(tmp_path / "b")
    assert resumed["params_digest"] == straight["params_digest"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(_lines(tmp_path / "b")) == strip(lines)


def test_a_python_controller_and_unknown_names(tmp_path):
    seen = []

    def halve_after_two(history):
        seen.append(len([r for r in history if r["kind"] == "eval"]))
        return {"entropy_cost": 0.0 if seen[-1] >= 2 else 1.0}

    setup = build("ppo", PPO, _run(controller=None, steps=512), halve_after_two)
    api.train(setup, str(tmp_path / "run"))
    assert seen == [1, 2, 3, 4]
    state = api.load_run(str(tmp_path / "run"))[2]
    assert float(jax.device_get(state.agent_state.controls["entropy_cost"])[0]) == 0.0
    bad = build("ppo", PPO, _run(controller=None, steps=512), lambda h: {"lr": 0.1})
    with pytest.raises(ConfigError, match=r"controller sets \['lr'\].*learning_rate"):
        api.train(bad, str(tmp_path / "bad"))
