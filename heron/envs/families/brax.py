"""``brax:<name>``: Brax's environments (ant, halfcheetah, hopper, ...), pure JAX, compiled
with the agent. Brax now points its users to MuJoCo Playground (``playground:<name>``)."""

from __future__ import annotations

import warnings

from heron.envs.family import Family, find_in
from heron.envs.jax_env import batched

EPISODE_LENGTH = 1000  # brax.training's default time limit; Brax's environments have none


def _ids() -> list[str]:
    from brax import envs

    return sorted(envs._envs)  # brax lists its registry nowhere else


def _make_one(env_id: str, name: str):
    from brax import envs

    from heron.envs.brax_style import BraxStyleEnvironment

    with warnings.catch_warnings():  # Brax's notice that it is no longer maintained, on every make
        warnings.filterwarnings("ignore", message="Brax System", category=UserWarning)
        made = BraxStyleEnvironment(envs.get_environment(name), EPISODE_LENGTH, env_id)
    return made, made.default_params


FAMILY = Family(
    prefix="brax",
    form="'brax:<name>' (e.g. brax:ant)",
    find=find_in(_ids),
    make=batched(_make_one),
    make_one=_make_one,
    jax_native=True,
    traced_libraries=("brax", "mujoco"),
    is_builtin=lambda name: True,  # brax is pinned
    requires=("brax",),
    extra="brax",
)
