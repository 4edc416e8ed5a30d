"""Environments that fail on purpose inside Ray actors, for tests/test_distributed.py (the
actors import this module through ``--env-module ray_envs``).

A fault is armed by a file in the directory named by ``$HERON_TEST_FAULTS``; it fires only
in an actor process (never in the learner, which steps the same ids to evaluate).
``kill_actor`` and ``raise_once`` fire once: whichever actor first removes the file fails.
``raise_always`` fires in every actor process, every incarnation, while the file exists.

- ``heron:CartPole-fragile-v1``: gymnax CartPole (a JAX env) whose actor SIGKILLs itself
  when it is asked for its ``KILL_AT_UNROLL``-th unroll. The kill is made on the host,
  between the actor's compiled calls, not by a host callback in the environment's step: a
  program with a host callback never enters JAX's persistent cache, and every program of
  this id (the actors' unrolls, the learner's evaluation) would compile again in every run.
- ``gym:HeronFlakyCartPole-v1``: Gymnasium CartPole whose ``step`` raises RuntimeError once
  the process has taken ``FAULT_AFTER`` steps.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys

import gymnasium
import jax
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnax.environments.classic_control.cartpole import CartPole

from heron import envs

FAULTS = "HERON_TEST_FAULTS"
FAULT_AFTER = 20  # steps (calls) this process takes before an armed fault fires
KILL_AT_UNROLL = 2  # the unroll (of this process) at whose request an armed kill fires
KILL, RAISE_ONCE, RAISE_ALWAYS = "kill_actor", "raise_once", "raise_always"

_steps = itertools.count(1)


def _in_actor() -> bool:
    if "ray" not in sys.modules:
        return False
    import ray

    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _armed(name: str, once: bool) -> bool:
    """Whether the fault ``name`` fires now (``once``: this process removed its file)."""
    path = os.path.join(os.environ.get(FAULTS, "/nonexistent"), name)
    if not once:
        return os.path.exists(path)
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _step_taken() -> int:
    return next(_steps) if _in_actor() else 0


def _kill_armed_actors() -> None:
    """In an actor process: its unrolls are counted, and an armed kill SIGKILLs the process
    when it is asked for the ``KILL_AT_UNROLL``-th, before it computes it. The count wraps
    the actor's compiled unroll where it is made (``jax.jit`` of ``EnvSource.collect``,
    which the actor calls after importing this module): Ray runs the actor from a copy of
    its class, so the class's own methods cannot be wrapped from here."""
    from heron.training.sources import EnvSource

    jit = jax.jit

    def jit_counting_unrolls(function, *args, **kwargs):
        compiled = jit(function, *args, **kwargs)
        inner = getattr(getattr(function, "func", None), "__func__", None)
        if inner is not EnvSource.collect:
            return compiled
        unrolls = itertools.count(1)

        def collect(*call_args):
            if next(unrolls) >= KILL_AT_UNROLL and _armed(KILL, once=True):
                os.kill(os.getpid(), signal.SIGKILL)
            return compiled(*call_args)

        return collect

    jax.jit = jit_counting_unrolls


class FlakyCartPole(CartPoleEnv):
    def step(self, action):
        count = _step_taken()
        if count >= FAULT_AFTER and (_armed(RAISE_ALWAYS, once=False) or _armed(RAISE_ONCE, True)):
            raise RuntimeError(f"environment broke at step {count}")
        return super().step(action)


def arm(directory, name: str) -> None:
    open(os.path.join(directory, name), "w").close()


def fragile_cartpole():
    env = CartPole()
    return env, env.default_params


if _in_actor():
    _kill_armed_actors()
envs.register("CartPole-fragile-v1", fragile_cartpole)
gymnasium.register("HeronFlakyCartPole-v1", entry_point=FlakyCartPole, max_episode_steps=500)
