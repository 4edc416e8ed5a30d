"""Run in a subprocess with two forced CPU devices (XLA_FLAGS must be set before jax is
imported): one update of PPO and of CRR on the same global batch, on one device and split
over two; prints the largest differences as a JSON line. With ``train``, also runs a short
CRR training on two devices and prints its summary."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from heron import agents, envs, parallel  # noqa: E402
from heron.types import Experience, StepType  # noqa: E402


def largest_difference(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in pairs)


def compare(agent, batch, key) -> dict:
    state = agent.init(jax.random.key(0))
    one_state, one_metrics = jax.jit(agent.update)(state, batch, key)
    two = jax.jit(parallel.shard_update(agent.update, jax.devices()[:2]))
    two_state, two_metrics = two(state, batch, key)
    return {
        "params": largest_difference(agent.params(one_state), agent.params(two_state)),
        "state": largest_difference(one_state, two_state),
        "metrics": largest_difference(one_metrics, two_metrics),
        "changed": largest_difference(agent.params(state), agent.params(one_state)),
    }


def random_steps(key, spec, shape, action):
    """Experience of the given [.., ..] shape with random observations and rewards, LAST steps
    scattered, and the given actions."""
    obs_key, reward_key, last_key = jax.random.split(key, 3)
    step_type = jnp.where(
        jax.random.uniform(last_key, shape) < 0.2, StepType.LAST, StepType.MID
    ).astype(jnp.int32)
    return Experience(
        step_type=step_type,
        reward=jax.random.normal(reward_key, shape),
        discount=jnp.where(step_type == StepType.LAST, 0.0, 1.0),
        observation=jax.random.normal(obs_key, shape + spec.observation_shape),
        action=action,
    )


def ppo_case(key) -> dict:
    spec = envs.make("gymnax:CartPole-v1", 1).spec
    agent = agents.make("ppo", spec, agents.PPOConfig())
    action_key, extras_key, steps_key = jax.random.split(key, 3)
    shape = (16, 5)  # [B, T+1]
    experience = random_steps(
        steps_key, spec, shape, jax.random.randint(action_key, shape, 0, 2)
    )._replace(
        extras={
            "log_prob": jnp.full(shape, np.log(0.5), jnp.float32),
            "value": jax.random.normal(extras_key, shape),
        }
    )
    state = agent.init(jax.random.key(0))
    batch = agent.preprocess(state, experience)  # [16, 4]
    sequences = jax.tree.map(lambda x: x.reshape((64, 1) + x.shape[2:]), batch)
    time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), sequences)  # [1, 64]
    return compare(agent, time_major, key)


def crr_case(key) -> dict:
    spec = envs.make("gymnax:Pendulum-v1", 1).spec
    agent = agents.make("crr", spec, agents.CRRConfig(hidden_sizes=(32, 32)))
    action_key, steps_key = jax.random.split(key)
    shape = (3, 16)  # [L, M], time-major
    actions = jax.random.uniform(action_key, shape + (1,), minval=-2.0, maxval=2.0)
    return compare(agent, random_steps(steps_key, spec, shape, actions), key)


def short_crr_training(run_dir: str) -> dict:
    """Two seeds of CRR on Pendulum, the learner split over the devices (the test runs the
    same on one device)."""
    from heron.training.config import RunConfig
    from heron.training.driver import build, train

    config = agents.CRRConfig(hidden_sizes=(32, 32), min_replay_size=256)
    run = RunConfig(env="gymnax:Pendulum-v1", steps=2048, seeds=2, eval_every_n=2)
    return train(build("crr", config, run), run_dir)


if __name__ == "__main__":
    key = jax.random.key(1)
    result = {"devices": len(jax.devices()), "ppo": ppo_case(key), "crr": crr_case(key)}
    if len(sys.argv) > 1:
        result["train"] = short_crr_training(sys.argv[1])
    print(json.dumps(result))
