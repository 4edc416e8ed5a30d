"""Run in a subprocess with two forced CPU devices (XLA_FLAGS must be set before jax is
imported; the test's own flags are kept, and its compile settings): for every agent of
tests/contract_cases.py, the same ``learn`` call on the same replay state with the learner
on one device and split over two; prints the largest differences as a JSON line. With a
run directory argument, also trains a short run with the learner on two devices and prints
its summary."""

import json
import os
import sys

FLAGS = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = f"{FLAGS} --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from contract_cases import CASES, TWO_DEVICE_TRAINING  # noqa: E402

from heron import agents, api  # noqa: E402
from heron.training import RunConfig  # noqa: E402
from heron.training.driver import seed_keys  # noqa: E402


@jax.jit
def _largest_differences(a, b):
    return [jnp.max(jnp.abs(x - y)) for x, y in zip(a, b, strict=True)]


def largest_difference(a, b) -> float:
    """The largest absolute difference between two trees' leaves (one program, not one
    small program per leaf shape)."""
    return max(map(float, _largest_differences(jax.tree.leaves(a), jax.tree.leaves(b))))


def small_run(env: str, **overrides) -> RunConfig:
    settings = dict(env=env, num_envs=8, n_evals=2, eval_temperatures=(0.0,), steps=512)
    return RunConfig(**{**settings, **overrides})


def compare(name: str) -> dict:
    """Fills a replay with collected steps until it can sample (no learning: the training
    iteration, the costliest program, is never compiled), then one ``learn`` on one device
    and one on two, from the same state and key."""
    case = CASES[name]
    setup = api.build(name, case.config, small_run(case.jax_env))
    state = jax.tree.map(lambda x: x[0], setup.program().init(seed_keys([0])))
    collect = jax.jit(setup.source.collect, static_argnums=0)
    add = jax.jit(setup.replay.add)
    replay_state, source_state = state.replay_state, state.source_state
    for k in range(8):
        if bool(setup.replay.can_sample(replay_state)):
            break
        key = jax.random.PRNGKey(100 + k)
        source_state, steps = collect(setup.agent, state.agent_state, source_state, key)
        replay_state = add(replay_state, steps)
    state = state._replace(replay_state=replay_state, source_state=source_state)
    key = jax.random.PRNGKey(7)
    one = agents.make(name, setup.agent.spec, case.config, devices=jax.devices()[:1])
    two = agents.make(name, setup.agent.spec, case.config, devices=jax.devices()[:2])
    assert bool(setup.replay.can_sample(state.replay_state)), name
    results = {}
    for label, agent in (("one", one), ("two", two)):
        learn = jax.jit(agent.learn, static_argnums=1)
        results[label] = learn(state.agent_state, setup.replay, state.replay_state, key)
    (one_state, _, one_metrics), (two_state, _, two_metrics) = results["one"], results["two"]
    return {
        "params": largest_difference(one.params(one_state), two.params(two_state)),
        "state": largest_difference(one_state, two_state),
        "metrics": largest_difference(one_metrics, two_metrics),
        "changed": largest_difference(one.params(state.agent_state), one.params(one_state)),
    }


def short_training(run_dir: str) -> dict:
    """Two seeds of CRR on Pendulum with the learner split over the devices (the test runs
    the same on one device)."""
    run = RunConfig(env=CASES["crr"].jax_env, **TWO_DEVICE_TRAINING)
    return api.train(api.build("crr", CASES["crr"].config, run), run_dir)


if __name__ == "__main__":
    result = {"devices": len(jax.devices())}
    result.update({name: compare(name) for name in CASES})
    if len(sys.argv) > 1:
        result["train"] = short_training(sys.argv[1])
    print(json.dumps(result))
