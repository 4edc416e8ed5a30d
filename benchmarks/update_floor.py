"""How close heron's SAC and TD3 updates are to the floor: plain updates at the same sizes.

On ``gym:HalfCheetah-v5``'s sizes (17 observations, 6 actions) with the agent's defaults,
which are SB3's (SAC: twin 256x256 ReLU critics, a 256x256 tanh-Gaussian policy, Adam at
3e-4, a learned temperature; TD3: twin 400x300 ReLU critics, a 400x300 tanh policy, Adam
at 1e-3, target smoothing noise 0.2 clipped at 0.5, the policy and the targets updated
every second update; both: batches of 256, Polyak targets at 0.005), three compiled scans
of updates on a ring of ``--capacity`` random transitions, timed alternately in one process
over ``--rounds`` (a shared machine whose speed drifts slows all three alike):

* ``plain``: the algorithm written in the fewest lines with flax and optax (this file): the
  transitions gathered from flat arrays, one update;
* ``heron update``: heron's ``agent.update`` on the same gathered transitions;
* ``heron learn``: heron's ``agent.learn``, which samples its ``uniform`` replay (sequences
  of two steps) and updates, as a training run does at every env step.

The first is what any JAX implementation pays on this CPU, so ``plain`` over heron's times
is the share of heron's update that is its own. What a training step adds on top (acting,
the env step's host callback, the replay's write) is ``mujoco.py --sections host``'s.

Then each of ``--peers`` (``sb3``: Stable-Baselines3 on one torch thread; ``sbx``: its JAX
port), in its own venv (``benchmarks/.venvs/``, made on first use) and process, after heron's
rounds: the same algorithm at the same sizes on the real env's replay of 10,000 random
steps, timed as ``model.train(gradient_steps=--updates)`` calls (its replay's sampling and
its updates, as ``heron learn``), the peer over ``heron learn`` printed as a ratio: the most
``mujoco.py``'s equal-work section can show on this CPU, if each loop around the updates
cost nothing.

    .venv/bin/python -P benchmarks/update_floor.py [--algo sac|td3] [--rounds 8] [--updates 100]
        [--peers sb3,sbx]

Prints one row per program and a final JSON line; timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from heron import agents, envs
from heron.types import Experience, StepType

# The sibling modules, after the installed packages: run with -P, as this file is, a
# benchmark named like a package (benchmarks/mujoco.py) must not shadow it.
sys.path.append(str(Path(__file__).parent))
from ppo_cartpole import prepare_peer  # noqa: E402

PEERS = Path(__file__).parent / "_peers"
PEER_REPLAY = 10_000  # random steps in the peers' replays before their timed updates

ENV = "gym:HalfCheetah-v5"
DISCOUNT, TAU = 0.99, 0.005
SAC_HIDDEN, SAC_LEARNING_RATE = (256, 256), 3e-4
TD3_HIDDEN, TD3_LEARNING_RATE = (400, 300), 1e-3
TD3_NOISE, TD3_NOISE_CLIP, TD3_POLICY_DELAY = 0.2, 0.5, 2


def relu_mlp(x, hidden: Sequence[int]):
    for size in hidden:
        x = nn.relu(nn.Dense(size)(x))
    return x


class PlainGaussianPolicy(nn.Module):
    actions: int
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, observation):
        x = relu_mlp(observation, self.hidden)
        return nn.Dense(self.actions)(x), jnp.clip(nn.Dense(self.actions)(x), -20.0, 2.0)


class PlainDeterministicPolicy(nn.Module):
    actions: int
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, observation):
        return jnp.tanh(nn.Dense(self.actions)(relu_mlp(observation, self.hidden)))


class PlainCritic(nn.Module):
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, observation, action):
        x = relu_mlp(jnp.concatenate([observation, action], axis=-1), self.hidden)
        return nn.Dense(1)(x)[..., 0]


class PlainTwinCritic(nn.Module):
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, observation, action):
        twins = nn.vmap(
            PlainCritic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            axis_size=2,
        )
        return twins(self.hidden)(observation, action)


def adam_step(optimizer, grads, params, opt_state):
    steps, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, steps), opt_state


def plain_sac(observations: int, actions: int):
    """(init(key) -> state, update(state, (o, a, r, d, o'), key) -> state) of a plain SAC."""
    policy, critic = PlainGaussianPolicy(actions, SAC_HIDDEN), PlainTwinCritic(SAC_HIDDEN)
    adam = optax.adam(SAC_LEARNING_RATE)

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
        new = [
            adam_step(adam, grads, params, opt_state)
            for grads, params, opt_state in zip(
                (policy_grads, critic_grads, alpha_grad),
                (policy_params, critic_params, log_alpha),
                opt_states,
                strict=True,
            )
        ]
        (policy_params, policy_opt), (critic_params, critic_opt), (log_alpha, alpha_opt) = new
        target_params = optax.incremental_update(critic_params, target_params, TAU)
        return (policy_params, critic_params, target_params, log_alpha,
                policy_opt, critic_opt, alpha_opt)  # fmt: skip

    return init, update


def plain_td3(observations: int, actions: int):
    """(init(key) -> state, update(state, (o, a, r, d, o'), key) -> state) of a plain TD3."""
    policy, critic = PlainDeterministicPolicy(actions, TD3_HIDDEN), PlainTwinCritic(TD3_HIDDEN)
    adam = optax.adam(TD3_LEARNING_RATE)

    def init(key):
        policy_key, critic_key = jax.random.split(key)
        policy_params = policy.init(policy_key, jnp.zeros((1, observations)))
        critic_params = critic.init(
            critic_key, jnp.zeros((1, observations)), jnp.zeros((1, actions))
        )
        return (jnp.zeros((), jnp.int32), policy_params, critic_params, policy_params,
                critic_params, adam.init(policy_params), adam.init(critic_params))  # fmt: skip

    def update(state, transitions, key):
        step, policy_params, critic_params, target_policy, target_critic, *opt_states = state
        policy_opt, critic_opt = opt_states
        observation, action, reward, done, next_observation = transitions
        next_action = policy.apply(target_policy, next_observation)
        noise = TD3_NOISE * jax.random.normal(key, next_action.shape)
        next_action = jnp.clip(next_action + jnp.clip(noise, -TD3_NOISE_CLIP, TD3_NOISE_CLIP),
                               -1.0, 1.0)  # fmt: skip
        next_q = critic.apply(target_critic, next_observation, next_action).min(0)
        target = jax.lax.stop_gradient(reward + DISCOUNT * (1 - done) * next_q)

        def critic_loss(params):
            return ((critic.apply(params, observation, action) - target) ** 2).mean(1).sum()

        critic_grads = jax.grad(critic_loss)(critic_params)
        critic_params, critic_opt = adam_step(adam, critic_grads, critic_params, critic_opt)
        step = step + 1

        def delayed(policy_parts):
            policy_params, policy_opt, target_policy, target_critic = policy_parts

            def policy_loss(params):
                sampled = policy.apply(params, observation)
                return -critic.apply(critic_params, observation, sampled)[0].mean()

            grads = jax.grad(policy_loss)(policy_params)
            policy_params, policy_opt = adam_step(adam, grads, policy_params, policy_opt)
            return (policy_params, policy_opt,
                    optax.incremental_update(policy_params, target_policy, TAU),
                    optax.incremental_update(critic_params, target_critic, TAU))  # fmt: skip

        policy_parts = (policy_params, policy_opt, target_policy, target_critic)
        policy_params, policy_opt, target_policy, target_critic = jax.lax.cond(
            step % TD3_POLICY_DELAY == 0, delayed, lambda parts: parts, policy_parts
        )
        return (step, policy_params, critic_params, target_policy, target_critic,
                policy_opt, critic_opt)  # fmt: skip

    return init, update


PLAIN = {"sac": plain_sac, "td3": plain_td3}


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


def programs(algo: str, capacity: int, updates: int) -> dict:
    """{name: (step(state, key) -> state, state)} of ``algo`` at its default configuration,
    each ``updates`` updates per call."""
    spec = envs.make(ENV, 1).spec
    observations, actions = spec.observation_shape[0], spec.action.shape[0]
    agent = agents.make(algo, spec)
    config = agent.config
    ring = random_ring(capacity, observations, actions, jax.random.key(1))
    replay = agent.make_replay(1)
    replay_state = replay.init(jax.tree.map(lambda x: x[:1], ring))
    replay_state = replay_state._replace(
        data=jax.tree.map(lambda x: x[None], ring),
        size=jnp.int32(capacity),
        credit=jnp.float32(np.inf),
    )
    plain_init, plain_update = PLAIN[algo](observations, actions)

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


def peer_updates(peer: str, args) -> dict:
    """{min_ms, median_ms} per update of ``peer``'s ``args.algo`` (in its own venv)."""
    argv = [
        str(prepare_peer(peer)), str(PEERS / "sb3_mujoco.py"), "--library", peer,
        "--algo", args.algo, "--env", ENV.removeprefix("gym:"), "--mode", "update",
        "--steps", str(PEER_REPLAY), "--learning-starts", str(PEER_REPLAY),
        "--rounds", str(args.rounds), "--updates", str(args.updates),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{peer}'s update timing failed ({done.returncode}):\n{done.stderr[-2000:]}")
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    return {"min_ms": payload["min_ms"], "median_ms": payload["median_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=sorted(PLAIN), default="sac")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=100, help="per timed call")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--peers", default="", help="of sb3, sbx; comma-separated")
    args = parser.parse_args()
    args.peers = [peer for peer in args.peers.split(",") if peer]
    unknown = set(args.peers) - {"sb3", "sbx"}
    if unknown:
        parser.error(f"unknown --peers {sorted(unknown)}; valid: sb3, sbx")
    runs = programs(args.algo, args.capacity, args.updates)
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
    for peer in args.peers:
        row = rows[peer] = peer_updates(peer, args)
        row["over_plain"] = row["min_ms"] / floor
        row["over_heron_learn"] = row["min_ms"] / rows["heron learn"]["min_ms"]
        print(f"{peer:>13}: {row['min_ms']:.2f} ms per update (min), median "
              f"{row['median_ms']:.2f}, {row['over_plain']:.2f}x plain, "
              f"{row['over_heron_learn']:.2f}x heron learn")  # fmt: skip
    print(json.dumps({"benchmark": "update_floor", "env": ENV, **vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
