"""``playground:<name>``: MuJoCo Playground's environments (the dm_control suite such as
``CheetahRun``, locomotion, manipulation), pure JAX on MJX, compiled with the agent.

Playground's default physics implementation for many of them is ``warp``, which runs only on
a GPU; heron asks for ``impl="jax"`` where JAX has no GPU."""

from __future__ import annotations

from heron.envs.family import Family, find_in
from heron.envs.jax_env import batched


def _ids() -> list[str]:
    from mujoco_playground import registry

    return list(registry.ALL_ENVS)


def _make_one(env_id: str, name: str):
    import jax
    from mujoco_playground import registry

    from heron.envs.brax_style import BraxStyleEnvironment

    config = registry.get_default_config(name)
    overrides = {}
    if "impl" in config and jax.default_backend() != "gpu":
        overrides["impl"] = "jax"
    env = registry.load(name, config=config, config_overrides=overrides)
    made = BraxStyleEnvironment(env, int(config.episode_length), env_id)
    return made, made.default_params


FAMILY = Family(
    prefix="playground",
    form="'playground:<name>' (e.g. playground:CheetahRun)",
    find=find_in(_ids),
    make=batched(_make_one),
    make_one=_make_one,
    jax_native=True,
    traced_libraries=("playground", "mujoco-mjx", "mujoco"),
    is_builtin=lambda name: True,  # playground is pinned
    requires=("mujoco_playground",),
    extra="playground",
)
