"""Presets (heron/presets/<algo>.toml): every shipped entry is a valid config; the CLI starts
from the preset of --env, any option overrides it, --preset none gives the defaults and
--preset KEY another environment's; unknown names are refused with the valid ones."""

import dataclasses

import pytest

from heron import agents, presets
from heron.cli import _parse_train, main
from heron.run_config import RunConfig

PENDULUM = "gymnax:Pendulum-v1"


def _every_preset():
    for algo, keys in presets.listing().items():
        for key in keys:
            yield algo, key


@pytest.mark.parametrize("algo, key", list(_every_preset()))
def test_every_shipped_preset_is_a_valid_config(algo, key):
    """Each entry names only existing fields, and its values pass the configs' checks."""
    offline = key.startswith(presets.OFFLINE)
    env = presets.env_of(key)
    config, run = presets.preset(algo, env, key, dataset="data" if offline else None)
    assert isinstance(config, agents.config_class(algo))
    assert run.preset == f"{algo}/{key}" and run.env == env
    for name, value in presets.record(algo, key)["run"].items():
        expected = tuple(value) if isinstance(value, list) else value
        assert getattr(run, name) == expected, name


def test_the_shipped_presets_cover_the_issue_list():
    listing = presets.listing()
    for env in ("gymnax:CartPole-v1", "gymnax:Acrobot-v1", "heron:CartPole-masked-v1", PENDULUM):
        assert env in listing["ppo"]
    for algo in ("crr", "svg0", "sac", "td3"):
        assert PENDULUM in listing[algo]
    assert "gymnax:CartPole-v1" in listing["dqn"]
    assert presets.OFFLINE + PENDULUM in listing["crr"]


def test_the_cli_starts_from_the_env_preset_and_an_option_overrides_it():
    algo, config, run = _parse_train(["crr", "--env", PENDULUM, "--crr.batch-size", "64"])
    preset_config, preset_run = presets.preset("crr", PENDULUM)
    assert run.preset == "crr/gymnax:Pendulum-v1"
    assert config.batch_size == 64 != preset_config.batch_size  # the option
    assert config == dataclasses.replace(preset_config, batch_size=64)  # the rest: the preset
    assert config.beta != agents.CRRConfig().beta and run.steps == preset_run.steps


def test_preset_none_gives_the_bare_defaults():
    _, config, run = _parse_train(["svg0", "--env", PENDULUM, "--preset", "none"])
    assert config == agents.SVG0Config()
    assert run == dataclasses.replace(RunConfig(env=PENDULUM), preset="none")


def test_another_environments_preset_by_name_and_no_preset_for_an_env_without_one():
    _, config, run = _parse_train(["sac", "--env", "gym:Pendulum-v1", "--preset", PENDULUM])
    assert run.preset == "sac/gymnax:Pendulum-v1" and run.env == "gym:Pendulum-v1"
    assert config == presets.preset("sac", PENDULUM)[0]
    _, config, run = _parse_train(["sac", "--env", "gym:Pendulum-v1"])  # auto: none for gym:
    assert run.preset == "none" and config == agents.SACConfig()


def test_learning_from_a_dataset_picks_the_offline_preset():
    key = presets.resolve("crr", PENDULUM, presets.AUTO, offline=True)
    assert key == presets.OFFLINE + PENDULUM
    assert presets.resolve("crr", PENDULUM, presets.AUTO) == PENDULUM
    assert presets.resolve("svg0", PENDULUM, presets.AUTO, offline=True) is None


def test_an_unknown_preset_is_refused_naming_the_choices(capsys):
    with pytest.raises(presets.UnknownPresetError, match="choose auto, none or one of: "):
        presets.resolve("crr", PENDULUM, "gymnax:Pendulum-v2")
    assert main(["train", "svg0", "--env", PENDULUM, "--preset", "nope"]) == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines() == [
        "heron: error: unknown preset 'nope' for svg0; choose auto, none or one of: "
        "gymnax:Pendulum-v1"
    ]


def test_a_preset_naming_an_unknown_field_is_refused(monkeypatch):
    entry = {"gymnax:Pendulum-v1": {"run": {"steps": 10}, "sac": {"batch_sise": 32}}}
    monkeypatch.setattr(presets, "table", lambda algo: entry)
    with pytest.raises(presets.ConfigError, match=r"sets unknown fields \['batch_sise'\]"):
        presets.preset("sac", PENDULUM)
