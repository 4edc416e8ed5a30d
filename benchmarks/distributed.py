"""Actors on Ray: where the time goes, for A = 1, 2, 4 actors.

Usage (from the repository root, with heron[ray] installed)::

    .venv/bin/python benchmarks/distributed.py [--algo ppo] [--env gymnax:CartPole-v1]
        [--num-envs 32] [--steps 32768] [--actors 1 2 4] [--out FILE.json]

On one local Ray instance (127.0.0.1) it measures, with the algorithm's default settings:

1. actor-only steps/s: A actors unrolling with fixed parameters, no learner;
2. the learner's consumption rate: environment steps per second its ``learn`` takes in
   (one iteration's steps over the time of one learning phase, in this process);
3. the Ray round trip of an empty call to an actor (the fixed cost of every unroll);
4. parameter broadcast latency: ``ray.put`` of 10 KB to 100 MB and an actor receiving it;
5. end-to-end steps/s of ``heron train --actors A`` (synchronous driver, after compilation;
   also with ``--dist.policy-lag 1``, which overlaps collection and learning) beside a
   model's prediction, min(A x one actor's rate, learner rate), and the same model without
   overlap, 1 / (1 / (A x one actor's rate) + 1 / learner rate).

Timings are printed and written to ``--out`` as JSON, never asserted. On a machine with few
cores the actors and the learner share them: expect little or no speed-up from more actors
when the learner is the bottleneck (it is for PPO on CartPole).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from heron import api, distributed  # noqa: E402
from heron.distributed import cluster  # noqa: E402
from heron.distributed.worker import Worker  # noqa: E402
from heron.run_config import DistConfig, RunConfig  # noqa: E402
from heron.training.driver import seed_keys  # noqa: E402

SIZES = (10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)  # bytes broadcast


def _setup(args, actors: int, steps: int | None = None, policy_lag: int = 0):
    run = RunConfig(
        dist=DistConfig(policy_lag=policy_lag),
        env=args.env,
        num_envs=args.num_envs,
        steps=steps or args.steps,
        actors=actors,
        n_evals=2,
        eval_temperatures=(0.0,),
        eval_every_n=10**6,
        save_every_n=10**6,
        preset="none",
    )
    return api.build(args.algo, None, run)


def actor_only(args, actors: int, agent_state, rounds: int) -> float:
    """Steps per second of ``actors`` actors unrolling together with fixed parameters."""
    import ray

    setup = _setup(args, actors)
    spec = setup.source.pool.actors.spec
    remote = ray.remote(Worker).options(num_cpus=1)
    workers = [remote.remote(spec) for _ in range(actors)]
    params = ray.put(agent_state)
    keys = [np.asarray(jax.random.PRNGKey(a), np.uint32) for a in range(actors)]
    ray.get([w.init.remote(params, k) for w, k in zip(workers, keys, strict=True)])
    ray.get([w.unroll.remote(params, k, 0) for w, k in zip(workers, keys, strict=True)])  # compile
    tick = time.perf_counter()
    for _ in range(rounds):
        ray.get([w.unroll.remote(params, k, 0) for w, k in zip(workers, keys, strict=True)])
    seconds = time.perf_counter() - tick
    for worker in workers:
        ray.kill(worker)
    return rounds * setup.source.steps_per_iteration / seconds


def learner_rate(args, repeats: int = 10) -> float:
    """Environment steps per second the learner consumes (in-process learning phase)."""
    setup = _setup(args, 0)
    program = setup.program()
    state = jax.tree.map(lambda x: x[0], program.init(seed_keys([0])))
    collect = jax.jit(setup.source.collect, static_argnums=0)
    _, steps = collect(setup.agent, state.agent_state, state.source_state, jax.random.PRNGKey(1))
    replay, agent = setup.replay, setup.agent

    def learn(agent_state, replay_state, key):
        replay_state = replay.add(replay_state, steps)
        from heron.training.program import learn_phase

        return learn_phase(agent, replay, agent_state, replay_state, key, None)[0]

    learn = jax.jit(learn)
    jax.block_until_ready(learn(state.agent_state, state.replay_state, jax.random.PRNGKey(2)))
    tick = time.perf_counter()
    for i in range(repeats):
        out = learn(state.agent_state, state.replay_state, jax.random.PRNGKey(3 + i))
    jax.block_until_ready(out)
    return repeats * setup.steps_per_iteration / (time.perf_counter() - tick)


def round_trip_ms(calls: int = 100) -> float:
    import ray

    worker = ray.remote(_Empty).options(num_cpus=0).remote()
    ray.get(worker.empty.remote())
    tick = time.perf_counter()
    for _ in range(calls):
        ray.get(worker.empty.remote())
    elapsed = (time.perf_counter() - tick) / calls
    ray.kill(worker)
    return 1000 * elapsed


class _Empty:
    def empty(self, payload=None):
        return None


def broadcast_ms(size: int, repeats: int = 5) -> float:
    """``ray.put`` of ``size`` bytes and one actor receiving it, median of ``repeats``."""
    import ray

    worker = ray.remote(_Empty).options(num_cpus=0).remote()
    ray.get(worker.empty.remote())
    payload = np.ones(size // 4, np.float32)
    times = []
    for _ in range(repeats):
        tick = time.perf_counter()
        ray.get(worker.empty.remote(ray.put(payload)))
        times.append(time.perf_counter() - tick)
    ray.kill(worker)
    return 1000 * statistics.median(times)


def end_to_end(args, actors: int, policy_lag: int = 0) -> dict:
    setup = _setup(args, actors, policy_lag=policy_lag)
    with tempfile.TemporaryDirectory() as run_dir:
        summary = api.train(setup, os.path.join(run_dir, "run"))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--env", default="gymnax:CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--steps", type=int, default=32_768)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from heron.cli import configure_compile_cache

    configure_compile_cache()
    cluster.connect(None, max(args.actors))
    results = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "config": vars(args),
    }
    agent_state = jax.device_get(_setup(args, 0).agent.init(jax.random.PRNGKey(0)))
    learner = learner_rate(args)
    results["learner_steps_per_s"] = learner
    print(f"learner consumption: {learner:,.0f} env steps/s", flush=True)
    results["round_trip_ms"] = round_trip_ms()
    print(f"Ray round trip, empty call: {results['round_trip_ms']:.2f} ms", flush=True)
    results["broadcast_ms"] = {}
    for size in SIZES:
        results["broadcast_ms"][size] = broadcast_ms(size)
        print(f"broadcast {size / 1e6:g} MB: {results['broadcast_ms'][size]:.1f} ms", flush=True)
    single = None
    results["actors"] = {}
    for actors in args.actors:
        rate = actor_only(args, actors, agent_state, args.rounds)
        single = single or rate / actors
        summary = end_to_end(args, actors)
        overlapped = end_to_end(args, actors, policy_lag=1)
        measured = summary["steps_per_s_after_compile"]
        measured_lag = overlapped["steps_per_s_after_compile"]
        predicted = min(actors * single, learner)
        # Without overlap an iteration collects, then learns: the times add up.
        alternating = 1.0 / (1.0 / (actors * single) + 1.0 / learner)
        results["actors"][actors] = {
            "actor_only_steps_per_s": rate,
            "end_to_end_steps_per_s": measured,
            "end_to_end_policy_lag_1_steps_per_s": measured_lag,
            "predicted_steps_per_s": predicted,
            "predicted_without_overlap_steps_per_s": alternating,
            "per_actor_steps_per_s": summary["dist"]["actor_steps_per_s"],
        }
        print(
            f"A={actors}: actors alone {rate:,.0f} steps/s; end to end {measured:,.0f} "
            f"steps/s (policy lag 1: {measured_lag:,.0f}); model min(A x {single:,.0f}, "
            f"{learner:,.0f}) = {predicted:,.0f} (no overlap: {alternating:,.0f})",
            flush=True,
        )
    cluster.disconnect()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    print(json.dumps(results))


if __name__ == "__main__":
    distributed.require_ray()
    main()
