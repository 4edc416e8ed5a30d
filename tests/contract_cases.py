"""Every registered agent, with a small configuration and the environments it serves, for
the contract tests (tests/test_contract.py) and the 2-device check (tests/two_devices.py).
An agent added to heron is covered by adding its case here."""

from __future__ import annotations

import dataclasses
from typing import Any

from heron.agents import (
    CRRConfig,
    DQNConfig,
    NetworkConfig,
    PPOConfig,
    SACConfig,
    SVG0Config,
)
from heron.agents.base import ReplayConfig
from heron.agents.td3 import TD3Config

SMALL_NETWORK = NetworkConfig(hidden_sizes=(16,), torso="layer_norm_mlp", activation="elu")


@dataclasses.dataclass(frozen=True)
class Case:
    config: Any  # small, fast settings (not a learning configuration)
    jax_env: str
    gym_env: str
    offline: bool  # learns from a dataset
    serves: tuple[str, ...] = ("discrete", "continuous")  # action kinds it takes


CASES = {
    "ppo": Case(
        PPOConfig(unroll_length=8, batch_size=16, num_epochs=2),
        "gymnax:CartPole-v1",
        "gym:CartPole-v1",
        offline=False,
    ),
    "crr": Case(
        CRRConfig(
            network=SMALL_NETWORK,
            num_atoms=11,
            vmin=-20.0,
            vmax=0.0,
            batch_size=16,
            unroll_length=2,
            num_action_samples_policy=2,
            num_action_samples_td=2,
            replay=ReplayConfig(min_size=32, ratio=0.5),
        ),
        "gymnax:Pendulum-v1",
        "gym:Pendulum-v1",
        offline=True,
    ),
    "svg0": Case(
        SVG0Config(
            network=SMALL_NETWORK,
            batch_size=16,
            unroll_length=2,
            sequence_length=3,
            num_action_samples=2,
            prior=True,
            replay=ReplayConfig(min_size=32, ratio=0.5),
        ),
        "gymnax:Pendulum-v1",
        "gym:Pendulum-v1",
        offline=True,
        serves=("continuous",),
    ),
    "sac": Case(
        SACConfig(
            network=SMALL_NETWORK,
            batch_size=16,
            unroll_length=2,
            sequence_length=3,
            replay=ReplayConfig(min_size=32, ratio=0.5),
        ),
        "gymnax:Pendulum-v1",
        "gym:Hopper-v5",  # MuJoCo through Gymnasium (heron[mujoco]), with terminations
        offline=True,
        serves=("continuous",),
    ),
    "td3": Case(
        TD3Config(
            network=SMALL_NETWORK,
            batch_size=16,
            unroll_length=2,
            sequence_length=3,
            policy_delay=1,  # the 2-device check's single update must move the policy
            replay=ReplayConfig(min_size=32, ratio=0.5),
        ),
        "gymnax:Pendulum-v1",
        "gym:Hopper-v5",  # MuJoCo through Gymnasium (heron[mujoco]), with terminations
        offline=True,
        serves=("continuous",),
    ),
    "dqn": Case(
        DQNConfig(
            network=SMALL_NETWORK,
            learning_rate=1e-3,  # the 2-device check needs the parameters to move
            batch_size=16,
            unroll_length=2,
            n_step=2,
            sequence_length=3,
            target_update_period=10,
            epsilon="linear(1.0, 0.1, 256)",
            replay=ReplayConfig(min_size=32, ratio=0.5),
        ),
        "gymnax:CartPole-v1",
        "gym:CartPole-v1",
        offline=True,
        serves=("discrete",),
    ),
}


# The contract's run on a JAX environment (tests/test_contract.py): what the compiled
# programs depend on, and the same on the command line.
RUN = dict(num_envs=4, n_evals=2, eval_temperatures=(1.0, 0.0))
RUN_FLAGS = ["--num-envs", "4", "--n-evals", "2", "--eval-temperatures", "1.0", "0.0"]


def flags(name: str) -> list[str]:
    """The ``--NAME.*`` options that make the agent's defaults into its case's config (with
    ``--preset none``): a run from the command line with them and RUN_FLAGS compiles the
    contract run's programs."""
    options: list[str] = []

    def walk(prefix: str, value, default) -> None:
        for field in dataclasses.fields(value):
            given, usual = getattr(value, field.name), getattr(default, field.name)
            if given == usual:
                continue
            if dataclasses.is_dataclass(given):
                walk(f"{prefix}.{field.name}", given, usual)
                continue
            words = [str(v) for v in given] if isinstance(given, tuple) else [str(given)]
            options.extend([f"--{prefix}.{field.name.replace('_', '-')}", *words])

    config = CASES[name].config
    walk(name, config, type(config)())
    return options


# CRR's short run with two seeds that tests/two_devices.py trains with the learner split over
# two devices and tests/test_parallel.py on one.
TWO_DEVICE_TRAINING = dict(
    num_envs=4, n_evals=2, eval_temperatures=(0.0,), steps=1024, seeds=2, eval_every_n=32
)
