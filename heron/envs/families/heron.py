"""``heron:<id>``: environments registered in this process, with ``register(env_id,
factory)`` or, for an environment object, ``id_of(env)``; heron's own variants
(``heron:CartPole-masked-v1``, ``heron:LegalChoice-v0``,
``heron:DictCue-v0``) are registered here."""

from __future__ import annotations

from collections.abc import Callable

from heron.envs.adapters import batched_from, gymnax_environment_type, import_gymnax, make_from
from heron.envs.errors import UnknownEnvError
from heron.envs.family import Family, find_in


def _masked_cartpole():
    import_gymnax()
    from heron.envs.classic import masked_cartpole

    return masked_cartpole()


def _legal_choice():
    import_gymnax()
    from heron.envs.legal_choice import legal_choice

    return legal_choice()


def _dict_cue():
    import_gymnax()
    from heron.envs.dict_cue import dict_cue

    return dict_cue()


_BUILTIN_ENVS = {
    "CartPole-masked-v1": _masked_cartpole,
    "LegalChoice-v0": _legal_choice,
    "DictCue-v0": _dict_cue,
}


# id -> factory() returning a gymnax (env, params) pair, a gymnax Environment or a gymnasium.Env.
_HERON_ENVS: dict[str, Callable] = dict(_BUILTIN_ENVS)


def register(env_id: str, factory: Callable) -> None:
    """Registers ``heron:<env_id>``; ``factory()`` returns a gymnax (env, params) pair, a
    gymnax Environment or a gymnasium.Env (one per call: heron makes several copies)."""
    _HERON_ENVS[env_id] = factory


def id_of(env) -> str:
    """The id under which an environment object runs: a gymnasium.Env (copied for each of
    the run's environments) or a gymnax Environment or (env, params) pair, registered as
    ``heron:<its class name>`` in this process (another process, to resume or evaluate the
    run, registers it again with ``register``; ``module.path:Attribute`` ids need not)."""
    import copy

    import gymnasium

    pair = env if isinstance(env, tuple) else None
    target = pair[0] if pair else env
    if not isinstance(target, gymnasium.Env | gymnax_environment_type()):
        raise UnknownEnvError(
            f"env={env!r} is not an environment: pass an id string, a gymnasium.Env, a gymnax "
            "Environment or a gymnax (env, params) pair"
        )
    name = type(target).__name__
    if isinstance(target, gymnasium.Env):
        factory = lambda: copy.deepcopy(env)  # noqa: E731
    else:
        factory = lambda: env  # noqa: E731  (a JAX environment is stateless)
    base, copies = name, 1
    while name in _HERON_ENVS and getattr(_HERON_ENVS[name], "heron_env_object", None) is not env:
        copies += 1
        name = f"{base}-{copies}"
    factory.heron_env_object = env
    _HERON_ENVS[name] = factory
    return f"heron:{name}"


def _is_builtin(name: str) -> bool:
    return name in _BUILTIN_ENVS and _HERON_ENVS.get(name) is _BUILTIN_ENVS[name]


def _make(env_id: str, name: str, num_envs: int, max_episode_steps: int | None):
    return batched_from(env_id, _HERON_ENVS[name], num_envs, max_episode_steps)


def _make_one(env_id: str, name: str):
    return make_from(env_id, _HERON_ENVS[name])


FAMILY = Family(
    prefix="heron",
    find=find_in(lambda: sorted(_HERON_ENVS)),
    make=_make,
    make_one=_make_one,
    jax_native=True,
    traced_libraries=("gymnax",),  # its variants are gymnax environments
    is_builtin=_is_builtin,
)
