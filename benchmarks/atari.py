"""Atari on the host: heron's rollouts against ale-py's own vector environment, and the
update rates of PPO and DQN with the Nature CNN, all in one process (rounds alternate, so
that a machine whose speed drifts slows every figure alike).

Usage (from the repository root)::

    .venv/bin/python -P benchmarks/atari.py [--game Breakout-v5] [--num-envs 8,16]
        [--rounds 3] [--out benchmarks/results/atari.json]

- ``raw``: ``ale_py.vector_env.AtariVectorEnv`` as heron makes it (84x84 grey frames, frame
  skip 4, sticky actions 0.25), stepped with random actions from Python: env steps/s.
- ``raw + policy``: the same vector env in a Python loop, each step's action chosen by the
  same Nature CNN (jitted, 4 stacked uint8 frames, sampled from its logits): what a
  hand-written host loop with this policy gets on this machine.
- ``rollout``: heron's collection (``EnvSource.collect``, compiled, the env stepped through
  its host callback) by PPO's policy: the Nature CNN on 4 stacked frames choosing every
  action, the frames kept as uint8. Target: at least 0.8x ``raw`` at the same number of
  envs. On a CPU the policy's forward pass is part of the step (``raw + policy`` shows what
  that leaves); on a GPU it is not.
- ``ppo update``: one iteration of heron's PPO (the CleanRL Atari settings: 128-step
  unrolls, 4 epochs of 4 mini-batches, one Nature CNN shared by policy and value) less its
  collection, per mini-batch update of ``num_envs * 128 / 4`` frames.
- ``dqn update``: DQN's iterations (one step per env, then its updates: the ``ale:`` DQN
  preset's, batches of 32 with one-step targets, Nature CNN, frames stacked again from the
  replay) per update.

Timings are printed and stored, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np

from heron import api, presets
from heron.agents import DQNConfig, NetworkConfig, PPOConfig
from heron.envs.families.ale import AtariConfig
from heron.run_config import RunConfig
from heron.training.driver import seed_keys

ROOT = Path(__file__).resolve().parent.parent
NATURE = NetworkConfig(torso="nature_cnn", hidden_sizes=(512,), activation="relu")
UNROLL = 128


def raw_rate(game: str, num_envs: int, steps: int) -> float:
    """ale-py's vector env alone, random actions: env steps/s."""
    env = atari_vector_env(game, num_envs, AtariConfig())
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.single_action_space.n, (steps, num_envs))
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def raw_with_policy_rate(game: str, num_envs: int, steps: int) -> float:
    """ale-py's vector env in a Python loop, acting by the Nature CNN: env steps/s."""
    import jax.numpy as jnp

    from heron.networks import DenseHead, make_network

    env = atari_vector_env(game, num_envs, AtariConfig())
    n_actions = env.single_action_space.n
    network = make_network(NATURE, DenseHead((n_actions,), 0.01), (4, 84, 84, 1))
    params = network.init(jax.random.PRNGKey(0))
    first = jnp.zeros((num_envs,), bool)

    @jax.jit
    def act(params, frames, t):
        logits = network.step(params, (), frames, first)[1]
        return jax.random.categorical(jax.random.fold_in(jax.random.PRNGKey(1), t), logits)

    obs, _ = env.reset(seed=0)
    history = np.repeat(obs.reshape(num_envs, 1, 84, 84, 1), 4, axis=1)
    np.asarray(act(params, history, -1))  # compiles
    start = time.perf_counter()
    for t in range(steps):
        obs, *_ = env.step(np.asarray(act(params, history, t)))
        history = np.concatenate([history[:, 1:], obs.reshape(num_envs, 1, 84, 84, 1)], 1)
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def atari_vector_env(game: str, num_envs: int, options):
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        game=game,
        num_envs=num_envs,
        stack_num=1,
        repeat_action_probability=options.repeat_action_probability,
        reward_clipping=False,
    )


def _run(env: str, num_envs: int, **changes) -> RunConfig:
    return RunConfig(
        env=env, num_envs=num_envs, len_history_for_policy=4, clip_rewards=True,
        eval_every_n=10**6, **changes,
    )  # fmt: skip


def dqn_config() -> DQNConfig:
    """The ``ale:`` DQN preset's learner (CleanRL's: batches of 32, one-step targets, one
    update every 4 env steps) with a replay small enough to fill at once."""
    config, _ = presets.preset("dqn", "ale:Breakout-v5")
    replay = dataclasses.replace(config.replay, min_size=64, capacity=2_000)
    return dataclasses.replace(config, replay=replay)


def ppo_setup(env: str, num_envs: int):
    config = PPOConfig(
        network=NATURE, two_towers=False, unroll_length=UNROLL, num_epochs=4,
        batch_size=num_envs * UNROLL // 4, learning_rate=2.5e-4, clip_range=0.1,
        entropy_cost=0.01, gae_lambda=0.95,
    )  # fmt: skip
    setup = api.build("ppo", config, _run(env, num_envs))
    program = setup.program()
    return setup, program, program.init(seed_keys(setup.seeds))


def collect_once(source, agent, state, key):
    """One unroll of ``source`` by ``agent``'s policy: its new source state."""
    return source.collect(agent, state.agent_state, state.source_state, key)[0]


def timed(function, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(function(*args))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="Breakout-v5")
    parser.add_argument("--num-envs", default="8,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/atari.json"))
    args = parser.parse_args()
    env = f"ale:{args.game}"
    from heron.envs.families.ale import _registry_ids

    game = _registry_ids()[args.game]
    results = {
        "machine": platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)),
        "game": args.game,
        "rows": [],
    }
    for num_envs in (int(n) for n in args.num_envs.split(",")):
        setup, program, state = ppo_setup(env, num_envs)
        collect = jax.jit(jax.vmap(functools.partial(collect_once, setup.source, setup.agent)))

        keys = jax.random.split(jax.random.PRNGKey(1), 1)
        timed(collect, state, keys)  # compiles
        state, _ = program.iteration(state, np.int32(1))  # compiles
        dqn = api.build("dqn", dqn_config(), _run(env, num_envs))
        dqn_program = dqn.program()
        dqn_state = dqn_program.init(seed_keys(dqn.seeds))
        dqn_state, _ = dqn_program.iteration(dqn_state, np.int32(64 // num_envs + 1))  # fills
        raws, raws_with_policy, rollouts, ppo_updates, dqn_updates = [], [], [], [], []
        for _ in range(args.rounds):
            raws.append(raw_rate(game, num_envs, 2_000 // num_envs * 4))
            raws_with_policy.append(raw_with_policy_rate(game, num_envs, 1_000 // num_envs * 4))
            seconds = timed(collect, state, keys)
            rollouts.append(num_envs * UNROLL / seconds)
            start = time.perf_counter()
            state, metrics = jax.block_until_ready(program.iteration(state, np.int32(1)))
            learning = time.perf_counter() - start - seconds
            ppo_updates.append(float(metrics["train/updates"][0]) / max(learning, 1e-9))
            start = time.perf_counter()
            dqn_state, metrics = jax.block_until_ready(
                dqn_program.iteration(dqn_state, np.int32(20))
            )
            dqn_seconds = time.perf_counter() - start
            dqn_updates.append(float(metrics["train/updates"][0]) / dqn_seconds)
        row = {
            "num_envs": num_envs,
            "raw_steps_per_s": float(np.median(raws)),
            "raw_with_policy_steps_per_s": float(np.median(raws_with_policy)),
            "rollout_steps_per_s": float(np.median(rollouts)),
            "ppo_updates_per_s": float(np.median(ppo_updates)),
            "ppo_update_frames": num_envs * UNROLL // 4,
            "dqn_updates_per_s": float(np.median(dqn_updates)),
        }
        row["rollout_over_raw"] = row["rollout_steps_per_s"] / row["raw_steps_per_s"]
        row["rollout_over_raw_with_policy"] = (
            row["rollout_steps_per_s"] / row["raw_with_policy_steps_per_s"]
        )
        results["rows"].append(row)
        print(
            f"{num_envs:3d} envs: raw {row['raw_steps_per_s']:8.0f} steps/s, raw + policy "
            f"{row['raw_with_policy_steps_per_s']:7.0f}, heron rollout "
            f"{row['rollout_steps_per_s']:7.0f} ({row['rollout_over_raw']:.2f}x raw, target "
            f">= 0.8x; {row['rollout_over_raw_with_policy']:.2f}x raw + policy), "
            f"PPO {row['ppo_updates_per_s']:.2f} updates/s of "
            f"{row['ppo_update_frames']} frames, DQN {row['dqn_updates_per_s']:.2f} "
            "updates/s of 32",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
