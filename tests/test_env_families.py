"""Environment families: a user's family registered from its module and made through
``heron.envs`` like heron's own, and the one-line refusals (an unknown prefix, a prefix
registered twice, a family whose optional dependency is missing)."""

from __future__ import annotations

import dataclasses

import gymnasium
import pytest
from custom_envs import LIMIT

from heron import envs
from heron.cli import main
from heron.envs.family import find_in


def _unbuildable(env_id, name, *args):
    raise AssertionError(f"{env_id} was made although its dependency is missing")


NEEDS_MISSING = envs.Family(
    prefix="needs-missing",
    find=find_in(lambda: ["Env-v0"]),
    make=_unbuildable,
    make_one=_unbuildable,
    jax_native=True,
    requires=("heron_test_no_such_module",),
    extra="no-such-extra",
)


@pytest.fixture(scope="module")
def toy():
    """The family ``tests/custom_env_family.py`` registers when imported."""
    return envs.import_env_module("custom_env_family").FAMILY


def test_a_registered_family_makes_its_envs(toy):
    assert envs.parse_env_id("toy:Counter") == ("toy", "Counter")
    counter = envs.make("toy:Counter", 3)
    assert counter.is_jax and counter.num_envs == 3 and counter.spec.max_episode_steps == LIMIT
    tiny = envs.make("toy:Tiny", 2, max_episode_steps=2)
    assert not tiny.is_jax and tiny.spec.max_episode_steps == 2
    assert tiny.spec.observation_shape == counter.spec.observation_shape == (2,)
    assert isinstance(envs.make_one("toy:Tiny"), gymnasium.Env)
    env, params = envs.make_one("toy:Counter")
    assert params.max_steps_in_episode == LIMIT
    assert not envs.is_builtin("toy:Counter")
    assert set(envs.traced_libraries()) == {"gymnax", "brax", "playground", "mujoco-mjx", "mujoco"}


def test_a_registered_family_is_checked(toy):
    report = envs.check("toy:Tiny", steps=50)
    assert report.ok and report.kind == "gymnasium" and report.steps == 50


def test_check_env_imports_the_module_that_registers_a_family(capsys):
    argv = ["check-env", "toy:Tiny", "--env-module", "custom_env_family", "--steps", "20"]
    assert main(argv) == 0
    assert '"env": "toy:Tiny", "ok": true' in capsys.readouterr().out


def test_an_unknown_name_lists_the_familys_ids(toy):
    with pytest.raises(envs.UnknownEnvError) as raised:
        envs.make("toy:Nope")
    message = "unknown toy environment 'Nope' in 'toy:Nope'; toy ids: Counter, Tiny"
    assert str(raised.value) == message


def test_an_unknown_prefix_lists_the_families(toy):
    with pytest.raises(envs.UnknownEnvError) as raised:
        envs.make("no-such-family:CartPole-v1")
    message = str(raised.value)
    assert message.startswith(
        "unknown environment 'no-such-family:CartPole-v1': environment ids carry their source: "
    )
    for form in ("'gymnax:<id>' (e.g. gymnax:CartPole-v1)", "'gym:<id>'", "'heron:<id>'",
                 "'toy:<id>'", "or 'module.path:Attribute' for your own"):  # fmt: skip
        assert form in message


def test_a_prefix_is_registered_once(toy):
    envs.register_family(toy)  # the same family again (its module imported twice): kept
    other = dataclasses.replace(toy, jax_native=False)
    with pytest.raises(ValueError, match="prefix 'toy' is registered already"):
        envs.register_family(other)
    with pytest.raises(ValueError, match="prefix 'gymnax' is registered already"):
        envs.register_family(dataclasses.replace(toy, prefix="gymnax"))
    assert envs.make("toy:Counter").is_jax  # still the first family


def test_a_prefix_is_a_name():
    with pytest.raises(ValueError, match="prefix 'my toys' is not a name"):
        dataclasses.replace(NEEDS_MISSING, prefix="my toys")


def test_a_missing_optional_dependency_names_the_extra(capsys):
    envs.register_family(NEEDS_MISSING)
    message = (
        "cannot make needs-missing:Env-v0: it needs the Python package "
        "'heron_test_no_such_module', which is not installed; install heron's no-such-extra "
        'extra: pip install "heron[no-such-extra]"'
    )
    for build in (envs.make, envs.make_one, envs.parse_env_id):
        with pytest.raises(envs.EnvUnavailableError) as raised:
            build("needs-missing:Env-v0")
        assert str(raised.value) == message
    assert main(["check-env", "needs-missing:Env-v0"]) == 2
    assert capsys.readouterr().err == f"heron: error: {message}\n"


def test_the_program_cache_keys_the_libraries_families_trace():
    from heron.training import program_cache

    assert "gymnax" not in program_cache.BASE_LIBRARIES
    traced = ("gymnax", "brax", "mujoco", "playground", "mujoco-mjx")
    assert sorted(program_cache.libraries()) == sorted((*program_cache.BASE_LIBRARIES, *traced))
