"""Environments that fail on purpose inside Ray actors, for tests/test_distributed.py (the
actors import this module through ``--env-module ray_envs``).

A fault is armed by a file in the directory named by ``$HERON_TEST_FAULTS``; it fires only
in an actor process (never in the learner, which steps the same ids to evaluate) once that
process has taken ``FAULT_AFTER`` steps. ``kill_actor`` and ``raise_once`` fire once:
whichever actor first removes the file fails. ``raise_always`` fires in every actor
process, every incarnation, while the file exists.

- ``heron:CartPole-fragile-v1``: gymnax CartPole (a JAX env) whose actor SIGKILLs itself.
- ``gym:HeronFlakyCartPole-v1``: Gymnasium CartPole whose ``step`` raises RuntimeError.
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


def _maybe_die(time) -> None:
    if _step_taken() >= FAULT_AFTER and _armed(KILL, once=True):
        os.kill(os.getpid(), signal.SIGKILL)


class FragileCartPole(CartPole):
    """gymnax CartPole whose step reports to the host (no effect on the numbers)."""

    def step_env(self, key, state, action, params):
        jax.debug.callback(_maybe_die, state.time)
        return super().step_env(key, state, action, params)


class FlakyCartPole(CartPoleEnv):
    def step(self, action):
        count = _step_taken()
        if count >= FAULT_AFTER and (_armed(RAISE_ALWAYS, once=False) or _armed(RAISE_ONCE, True)):
            raise RuntimeError(f"environment broke at step {count}")
        return super().step(action)


def arm(directory, name: str) -> None:
    open(os.path.join(directory, name), "w").close()


def fragile_cartpole():
    env = FragileCartPole()
    return env, env.default_params


envs.register("CartPole-fragile-v1", fragile_cartpole)
gymnasium.register("HeronFlakyCartPole-v1", entry_point=FlakyCartPole, max_episode_steps=500)
