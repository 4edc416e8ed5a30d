"""Where CRR's off-policy time goes: the cost of one learner update on Pendulum.

For a few CRR configurations, times a compiled scan of updates on a fixed batch of
sequences (no environment, no replay) and asks XLA for the floating-point operations of
one update, so the achieved GFLOP/s shows whether the learner is compute-bound.

    .venv/bin/python benchmarks/crr_update.py [--updates 200]

Prints one row per configuration and a final JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp

from heron import agents, envs
from heron.agents.crr import acme_network
from heron.types import Experience, StepType

SMALL = dataclasses.replace(acme_network(), hidden_sizes=(64, 64))
VARIANTS = {
    "acme defaults (256x256, 4+4 samples)": {},
    "1+1 action samples": {"num_action_samples_policy": 1, "num_action_samples_td": 1},
    "64x64 networks": {"network": SMALL},
    "64x64, 1+1 samples": {
        "network": SMALL,
        "num_action_samples_policy": 1,
        "num_action_samples_td": 1,
    },
}


def random_sequences(spec, length: int, size: int) -> Experience:
    key = jax.random.key(0)
    shape = (length, size)
    return Experience(
        step_type=jnp.full(shape, StepType.MID, jnp.int32),
        reward=jax.random.normal(key, shape),
        discount=jnp.ones(shape),
        observation=jax.random.normal(key, shape + spec.observation_shape),
        action=jax.random.uniform(key, shape + (1,), minval=-2.0, maxval=2.0),
    )


def measure(overrides: dict, updates: int) -> dict:
    spec = envs.make("gymnax:Pendulum-v1", 1).spec
    config = agents.CRRConfig(**overrides)
    agent = agents.make("crr", spec, config)
    batch = random_sequences(spec, config.sequence_length, config.batch_size)

    @jax.jit
    def many(state, key):
        def one(state, key):
            return agent.update(state, batch, key)[0], None

        return jax.lax.scan(one, state, jax.random.split(key, updates))[0]

    state = agent.init(jax.random.key(1))
    flops = jax.jit(agent.update).lower(state, batch, jax.random.key(2)).compile().cost_analysis()
    flops = flops.get("flops", float("nan")) if isinstance(flops, dict) else float("nan")
    jax.block_until_ready(many(state, jax.random.key(3)))  # compile
    start = time.perf_counter()
    jax.block_until_ready(many(state, jax.random.key(4)))
    seconds = (time.perf_counter() - start) / updates
    return {
        "ms_per_update": 1e3 * seconds,
        "updates_per_s": 1.0 / seconds,
        "gflop_per_update": flops / 1e9,
        "gflop_per_s": flops / 1e9 / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    rows = {}
    header = ("ms/update", "updates/s", "GFLOP", "GFLOP/s")
    print(f"{'CRR configuration':40s} " + " ".join(f"{h:>10s}" for h in header))
    for name, overrides in VARIANTS.items():
        row = measure(overrides, args.updates)
        rows[name] = row
        print(
            f"{name:40s} {row['ms_per_update']:10.2f} {row['updates_per_s']:10.1f} "
            f"{row['gflop_per_update']:10.3f} {row['gflop_per_s']:10.1f}"
        )
    print(json.dumps({"batch": 256, "devices": str(jax.devices()[0]), "variants": rows}))


if __name__ == "__main__":
    main()
