"""What tests/test_distributed.py's runs share: a local Ray instance for the module (bound to
127.0.0.1, 4 counted CPUs, a small object store) and its small runs (PPO's contract case on
CartPole, 2 actors of 2 envs). Faults are injected by the environments of tests/ray_envs.py,
armed by files: exactly one fault where one is asked for, never by chance. Runs are compared
bit for bit: the actors compile as the module's tests do (they inherit the setting, and the
XLA flag that goes with it, from the instance's environment)."""

from __future__ import annotations

import json
import os

import jax
import pytest
import ray_envs
from contract_cases import CASES, flags

from heron import api
from heron.distributed import cluster as ray_cluster
from heron.run_config import DistConfig, RunConfig

TESTS = os.path.dirname(os.path.abspath(__file__))
PPO = CASES["ppo"].config
JAX_ENV = "heron:CartPole-fragile-v1"
GYM_ENV = "gym:HeronFlakyCartPole-v1"
MARKS = [pytest.mark.ray]


def local_instance(tmp_path_factory):
    """Starts a Ray instance for a module (the ``cluster`` fixture of tests/conftest.py);
    yields (address, faults directory), then shuts it down."""
    import ray

    faults = tmp_path_factory.mktemp("faults")
    os.environ[ray_envs.FAULTS] = str(faults)  # the actor processes inherit it
    ray_cluster.loopback_only()
    ray.init(
        num_cpus=4,
        object_store_memory=200 * 1024**2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _system_config=ray_cluster.LOCAL_SYSTEM_CONFIG,  # as heron's own local instance
        log_to_driver=False,
    )
    ray_cluster.errors_to_stderr()
    yield ray.get_runtime_context().gcs_address, faults
    ray.shutdown()


def small_run(address, **overrides) -> RunConfig:
    dist = DistConfig(**overrides.pop("dist", {}))
    settings = dict(
        env=JAX_ENV,
        env_module="ray_envs",
        steps=512,  # 16 iterations of 32 steps
        num_envs=4,
        actors=2,
        ray_address=address,
        n_evals=2,
        eval_every_n=16,
        eval_temperatures=(0.0,),
        save_every_n=8,
        done_frac_for_policy_save=0.0,
    )
    return RunConfig(**{**settings, **overrides}, dist=dist)


def small_run_argv(address, run_dir, env: str, steps: int) -> list[str]:
    """``heron train`` options of ``small_run`` (with ``env`` and ``steps``), to add schedules
    and ``--dist.*`` options to."""
    return [
        "train", "ppo", "--env", env, "--env-module", "ray_envs", "--steps", str(steps),
        "--num-envs", "4", "--actors", "2", "--ray-address", address, "--run-dir", str(run_dir),
        "--n-evals", "2", "--eval-temperatures", "0.0", "--done-frac-for-policy-save", "0",
        *flags("ppo"),
    ]  # fmt: skip


def train(run: RunConfig, run_dir) -> dict:
    return api.train(api.build("ppo", PPO, run), str(run_dir))


def lines(run_dir, kind="train") -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [line for line in map(json.loads, f) if line["kind"] == kind]


def params(run_dir) -> list:
    setup, _, state, _ = api.load_run(str(run_dir))
    return jax.tree.leaves(setup.agent.params(state.agent_state))
