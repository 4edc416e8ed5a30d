"""Tuned settings per (agent, environment), RL Zoo's hyperparameter files for heron.

One TOML file per agent (``heron/presets/<algo>.toml``); each table is keyed by an
environment id and holds config.json's layout without ``algo``::

    ["gymnax:Pendulum-v1".run]
    steps = 20_000
    ["gymnax:Pendulum-v1".svg0]
    batch_size = 32
    ["gymnax:Pendulum-v1".svg0.network]
    hidden_sizes = [64, 64]

``heron train ALGO --env ID`` uses the preset for ID when there is one (``--preset none``:
the bare defaults; ``--preset ID2``: another environment's); any option given overrides it.
From Python: ``agent_config, run = heron.presets.preset("svg0", "gymnax:Pendulum-v1")``.
A table may also be keyed by the id without its source (``"Pendulum-v1"``) to serve
every source of that environment. A second preset for one environment, e.g. one sized for
a CPU beside one sized for a GPU, is keyed ``<env id>@<variant>``
(``"playground:CheetahRun@cpu"``) and used only when named: ``--preset
playground:CheetahRun@cpu``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib

from heron.configs import ConfigError, from_values, unknown_fields

NONE = "none"
AUTO = "auto"
FOLDER = os.path.dirname(__file__)


class UnknownPresetError(ConfigError):
    """A preset name that the agent's preset file does not hold."""


@functools.cache
def table(algo: str) -> dict:
    """Every preset of ``algo``, by environment key ({} when it has no preset file)."""
    path = os.path.join(FOLDER, f"{algo}.toml")
    if not os.path.isfile(path):
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


OFFLINE = "offline:"  # the prefix of presets for learning from a dataset
VARIANT = "@"  # "<env id>@<variant>": another preset for the same environment


def env_of(key: str) -> str:
    """The environment id a preset key is for (without ``offline:`` and ``@<variant>``)."""
    return key.removeprefix(OFFLINE).partition(VARIANT)[0]


def find(algo: str, env_id: str, offline: bool = False) -> str | None:
    """The key of ``algo``'s preset for ``env_id`` (the exact id, else the id without its
    source; ``offline``: keys prefixed ``offline:``), or None."""
    presets = table(algo)
    prefix = OFFLINE if offline else ""
    name = env_id.partition(":")[2]
    for key in (prefix + env_id, prefix + name):
        if key and key in presets:
            return key
    return None


def resolve(algo: str, env_id: str, choice: str, offline: bool = False) -> str | None:
    """The preset ``choice`` (auto, none or an environment key) names for ``algo`` on
    ``env_id`` (``offline``: learning from a dataset): a key, or None for the bare
    defaults."""
    if choice == NONE:
        return None
    if choice == AUTO:
        return find(algo, env_id, offline)
    if choice not in table(algo):
        known = ", ".join(sorted(table(algo))) or "(none)"
        raise UnknownPresetError(
            f"unknown preset {choice!r} for {algo}; choose auto, none or one of: {known}"
        )
    return choice


def record(algo: str, key: str) -> dict:
    """The preset as a config record (config.json's layout)."""
    entry = table(algo)[key]
    return {"algo": algo, "run": dict(entry.get("run", {})), algo: dict(entry.get(algo, {}))}


def label(algo: str, key: str | None) -> str:
    """How config.json and the final line name a preset: ``algo/key`` or ``none``."""
    return NONE if key is None else f"{algo}/{key}"


def apply(algo: str, key: str | None, agent_config, run):
    """(agent config, run config) with the preset's values on top (no preset: unchanged but
    for the run's ``preset`` label)."""
    if key is not None:
        values = record(algo, key)
        unknown = unknown_fields(type(agent_config), values[algo])
        unknown += unknown_fields(type(run), values["run"])
        if unknown:
            raise ConfigError(f"preset {label(algo, key)} sets unknown fields {sorted(unknown)}")
        agent_config = from_values(type(agent_config), values[algo], agent_config)
        run = from_values(type(run), values["run"], run)
    return agent_config, dataclasses.replace(run, preset=label(algo, key))


def preset(algo: str, env_id: str, choice: str = AUTO, dataset: str | None = None):
    """(agent config, run config) for ``algo`` on ``env_id`` (learning from ``dataset``
    when given) from its preset, the defaults when it has none: what ``heron train ALGO
    --env ENV_ID [--dataset DIR]`` starts from."""
    from heron import agents
    from heron.run_config import RunConfig

    key = resolve(algo, env_id, choice, offline=dataset is not None)
    run = RunConfig(env=env_id, dataset=dataset)
    return apply(algo, key, agents.config_class(algo)(), run)


SEARCH_SPACE = ".search.toml"  # heron tune's search spaces, beside the presets (heron.tune)


def listing() -> dict[str, list[str]]:
    """Every agent's preset keys, by agent."""
    names = [
        f.removesuffix(".toml")
        for f in sorted(os.listdir(FOLDER))
        if f.endswith(".toml") and not f.endswith(SEARCH_SPACE)
    ]
    return {algo: sorted(table(algo)) for algo in names}
