"""How close heron's SAC update is to the floor: a plain SAC update at the same sizes.

On ``gym:HalfCheetah-v5``'s sizes (17 observations, 6 actions) with SAC's defaults (twin
256x256 ReLU critics, a 256x256 tanh-Gaussian policy, batches of 256, Adam, a learned
temperature, Polyak targets), three compiled scans of updates on a ring of ``--capacity``
random transitions, timed alternately in one process over ``--rounds`` (a shared machine
whose speed drifts slows all three alike):

* ``plain``: SAC written in the fewest lines with flax and optax (this file): the
  transitions gathered from flat arrays, one update;
* ``heron update``: heron's ``agent.update`` on the same gathered transitions;
* ``heron learn``: heron's ``agent.learn``, which samples its ``uniform`` replay (sequences
  of two steps) and updates, as a training run does at every env step.

The first is what any JAX SAC pays on this CPU, so ``plain`` over heron's times is the
share of heron's update that is its own. What a training step adds on top (acting, the env
step's host callback, the replay's write) is ``mujoco.py --sections host``'s.

    .venv/bin/python -P benchmarks/sac_update.py [--rounds 8] [--updates 100]

Prints one row per program and a final JSON line; timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from heron import agents, envs
from heron.types import Experience, StepType

ENV = "gym:HalfCheetah-v5"
HIDDEN = 256
DISCOUNT, TAU, LEARNING_RATE = 0.99, 0.005, 3e-4


class PlainPolicy(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, observation):
        x = nn.relu(nn.Dense(HIDDEN)(observation))
        x = nn.relu(nn.Dense(HIDDEN)(x))
        return nn.Dense(self.actions)(x), jnp.clip(nn.Dense(self.actions)(x), -20.0, 2.0)


class PlainCritic(nn.Module):
    @nn.compact
    def __call__(self, observation, action):
        x = jnp.concatenate([observation, action], axis=-1)
        x = nn.relu(nn.Dense(HIDDEN)(x))
        x = nn.relu(nn.Dense(HIDDEN)(x))
        return nn.Dense(1)(x)[..., 0]


class PlainTwinCritic(nn.Module):
    @nn.compact
    def __call__(self, observation, action):
        twins = nn.vmap(
            PlainCritic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            axis_size=2,
        )
        return twins()(observation, action)


def plain_sac(observations: int, actions: int):
    """(init(key) -> state, update(state, (o, a, r, d, o'), key) -> state) of a plain SAC."""
    policy, critic = PlainPolicy(actions), PlainTwinCritic()
    adam = optax.adam(LEARNING_RATE)

    def sample(params, observation, key):
        mean, log_std = policy.apply(params, observation)
        noise = jax.random.normal(key, mean.shape)
        action = jnp.tanh(mean + jnp.exp(log_std) * noise)
        gaussian = -0.5 * noise**2 - log_std - 0.5 * jnp.log(2 * jnp.pi)
        return action, (gaussian - jnp.log(1 - action**2 + 1e-6)).sum(-1)

    def init(key):
        policy_key, critic_key = jax.random.split(key)
        policy_params = policy.init(policy_key, jnp.zeros((1, observations)))
        critic_params = critic.init(
            critic_key, jnp.zeros((1, observations)), jnp.zeros((1, actions))
        )
        log_alpha = jnp.zeros(())
        opt_states = tuple(adam.init(p) for p in (policy_params, critic_params, log_alpha))
        return (policy_params, critic_params, critic_params, log_alpha, *opt_states)

    def update(state, transitions, key):
        policy_params, critic_params, target_params, log_alpha, *opt_states = state
        observation, action, reward, done, next_observation = transitions
        next_key, policy_key = jax.random.split(key)
        alpha = jnp.exp(log_alpha)
        next_action, next_log_prob = sample(policy_params, next_observation, next_key)
        next_q = critic.apply(target_params, next_observation, next_action).min(0)
        target = reward + DISCOUNT * (1 - done) * (next_q - alpha * next_log_prob)

        def critic_loss(params):
            q = critic.apply(params, observation, action)
            return 0.5 * ((q - jax.lax.stop_gradient(target)) ** 2).mean(1).sum()

        def policy_loss(params):
            sampled, log_prob = sample(params, observation, policy_key)
            q = critic.apply(critic_params, observation, sampled).min(0)
            return (alpha * log_prob - q).mean(), log_prob

        critic_grads = jax.grad(critic_loss)(critic_params)
        policy_grads, log_prob = jax.grad(policy_loss, has_aux=True)(policy_params)
        entropy_gap = jax.lax.stop_gradient(log_prob - actions)
        alpha_grad = jax.grad(lambda value: (-value * entropy_gap).mean())(log_alpha)
        new = []
        for grads, params, opt_state in zip(
            (policy_grads, critic_grads, alpha_grad),
            (policy_params, critic_params, log_alpha),
            opt_states,
            strict=True,
        ):
            steps, opt_state = adam.update(grads, opt_state)
            new.append((optax.apply_updates(params, steps), opt_state))
        (policy_params, policy_opt), (critic_params, critic_opt), (log_alpha, alpha_opt) = new
        target_params = optax.incremental_update(critic_params, target_params, TAU)
        return (policy_params, critic_params, target_params, log_alpha,
                policy_opt, critic_opt, alpha_opt)  # fmt: skip

    return init, update


def random_ring(capacity: int, observations: int, actions: int, key) -> Experience:
    """One lane of ``capacity`` random steps, leaves [capacity, ...]."""
    keys = jax.random.split(key, 3)
    return Experience(
        step_type=jnp.full((capacity,), StepType.MID, jnp.int32),
        reward=jax.random.normal(keys[0], (capacity,)),
        discount=jnp.ones((capacity,)),
        observation=jax.random.normal(keys[1], (capacity, observations)),
        action=jax.random.uniform(keys[2], (capacity, actions), minval=-1.0, maxval=1.0),
        extras={"log_prob": jnp.zeros((capacity,))},
    )


def gathered(ring: Experience, key, batch_size: int) -> Experience:
    """``batch_size`` sequences of two consecutive steps, time-major [2, batch_size]."""
    capacity = ring.reward.shape[0]
    starts = jax.random.randint(key, (batch_size,), 0, capacity - 1)
    return jax.tree.map(lambda x: x[jnp.stack([starts, starts + 1])], ring)


def programs(capacity: int, updates: int) -> dict:
    """{name: (step(state, key) -> state, state)}, each ``updates`` updates per call."""
    spec = envs.make(ENV, 1).spec
    observations, actions = spec.observation_shape[0], spec.action.shape[0]
    config = agents.SACConfig()
    agent = agents.make("sac", spec, config)
    ring = random_ring(capacity, observations, actions, jax.random.key(1))
    replay = agent.make_replay(1)
    replay_state = replay.init(jax.tree.map(lambda x: x[:1], ring))
    replay_state = replay_state._replace(
        data=jax.tree.map(lambda x: x[None], ring),
        size=jnp.int32(capacity),
        credit=jnp.float32(np.inf),
    )
    plain_init, plain_update = plain_sac(observations, actions)

    def scanned(one):
        def many(state, key):
            return jax.lax.scan(one, state, jax.random.split(key, updates))[0]

        return jax.jit(many)

    def plain_one(state, key):
        sample_key, update_key = jax.random.split(key)
        steps = gathered(ring, sample_key, config.batch_size)
        transitions = (steps.observation[0], steps.action[0], steps.reward[1],
                       1.0 - steps.discount[1], steps.observation[1])  # fmt: skip
        return plain_update(state, transitions, update_key), None

    def heron_update_one(state, key):
        sample_key, update_key = jax.random.split(key)
        steps = gathered(ring, sample_key, config.batch_size)
        return agent.update(state, steps, update_key)[0], None

    def heron_learn_one(carry, key):
        state, replay_state = carry
        state, replay_state, _ = agent.learn(state, replay, replay_state, key)
        return (state, replay_state), None

    init_key = jax.random.key(0)
    return {
        "plain": (scanned(plain_one), plain_init(init_key)),
        "heron update": (scanned(heron_update_one), agent.init(init_key)),
        "heron learn": (scanned(heron_learn_one), (agent.init(init_key), replay_state)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=100, help="per timed call")
    parser.add_argument("--capacity", type=int, default=100_000)
    args = parser.parse_args()
    runs = programs(args.capacity, args.updates)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, (step, state) in runs.items():  # compile and warm up
        runs[name] = (step, jax.block_until_ready(step(state, jax.random.key(0))))
    for round_ in range(args.rounds):
        for name, (step, state) in runs.items():
            start = time.perf_counter()
            state = jax.block_until_ready(step(state, jax.random.key(round_ + 1)))
            times[name].append((time.perf_counter() - start) * 1e3 / args.updates)
            runs[name] = (step, state)
    rows = {
        name: {"min_ms": min(ms), "median_ms": statistics.median(ms)} for name, ms in times.items()
    }
    floor = rows["plain"]["min_ms"]
    for name, row in rows.items():
        row["over_plain"] = row["min_ms"] / floor
        print(f"{name:>13}: {row['min_ms']:.2f} ms per update (min), median "
              f"{row['median_ms']:.2f}, {row['over_plain']:.2f}x plain")  # fmt: skip
    settings = {"rounds": args.rounds, "updates": args.updates, "capacity": args.capacity}
    print(json.dumps({"benchmark": "sac_update", "env": ENV, **settings, "rows": rows}))


if __name__ == "__main__":
    main()
