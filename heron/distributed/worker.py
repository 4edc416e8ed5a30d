"""One actor process: ``num_envs / actors`` environments and everything that steps them.

A ``Worker`` owns an ``EnvSource`` over its environments and that source's state: the
environments' state, the observation pipeline's state, the pending step (acted on, not yet
executed), the agent's recurrent carry and the episode statistics. It acts with the agent's
own ``act``, compiled once in the actor. Every unroll returns a snapshot of that state (numpy),
from which the driver restores the actor after a failure or a resume.

This module imports no Ray: ``heron.distributed.actors`` wraps ``Worker`` in ``ray.remote``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import sys
import time
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """What an actor process needs to build its environments and its agent (picklable)."""

    algo: str
    agent_config: Any
    env: str
    env_module: str | None
    envs_per_actor: int
    max_timestep: int | None
    env_options: Any  # the family's own options (heron.envs.options_of), or None
    pipeline: Any  # the learner's ObservationPipeline: its actors record steps as it does
    compile_cache: str | None  # the driver's JAX compilation cache directory, if any
    python_path: tuple[str, ...] = ()  # the driver's sys.path and directory: env modules


class Unroll(NamedTuple):
    """One actor's unroll: steps [envs_per_actor, T] and its state after them (numpy)."""

    steps: Any
    snapshot: Any
    version: int  # the parameter version that acted
    seconds: float  # time the actor spent on it
    compiled: bool  # whether that time includes compiling the unroll (this process's first)


class EnvironmentFailure(RuntimeError):
    """An exception raised inside an actor, described in one line (picklable)."""


class _CallbackErrors(logging.Handler):
    """Keeps the exception a host callback (a Gymnasium env's step) raised: JAX reports it
    through its log and raises a generic runtime error in its place."""

    def __init__(self):
        super().__init__()
        self.last: BaseException | None = None

    def emit(self, record):
        if record.exc_info and record.exc_info[1] is not None:
            self.last = record.exc_info[1]


def describe(error: BaseException, original: BaseException | None) -> str:
    """``Type: message`` of the exception an environment raised (the host callback's own
    exception when JAX wrapped it), on one line."""
    from heron.envs.errors import EnvironmentRaised

    cause = original if original is not None else error
    where = ""
    if isinstance(cause, EnvironmentRaised):
        cause, where = cause.error, f" (in {cause.call})"
    text = " ".join(str(cause).split()) or "(no message)"
    return f"{type(cause).__name__}: {text}{where}"


class Worker:
    """The body of one Ray actor (see the module docstring)."""

    def __init__(self, spec: WorkerSpec):
        # Actors compute on the CPU and take no GPU memory (set before JAX starts a backend).
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        import jax

        jax.config.update("jax_platforms", "cpu")

        if spec.compile_cache:
            jax.config.update("jax_compilation_cache_dir", spec.compile_cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        from heron import agents, envs
        from heron.training.sources import EnvSource

        for path in reversed(spec.python_path):  # env modules import as in the driver
            if path not in sys.path and os.path.isdir(path):
                sys.path.insert(0, path)
        self._errors = _CallbackErrors()
        callback_log = logging.getLogger("jax._src.callback")
        callback_log.addHandler(self._errors)
        callback_log.propagate = False  # the driver reports the failure in one line
        envs.import_env_module(spec.env_module)
        env = envs.make(spec.env, spec.envs_per_actor, spec.max_timestep, spec.env_options)
        pipeline = dataclasses.replace(spec.pipeline, env_spec=env.spec)
        agent = agents.make(spec.algo, pipeline.spec, spec.agent_config, jax.devices()[:1])
        source = EnvSource(env, pipeline, agent.unroll_length, spec.max_timestep)
        self._init = jax.jit(functools.partial(source.init, agent))
        self._collect = jax.jit(functools.partial(source.collect, agent))
        self._restart = jax.jit(functools.partial(source.restart, agent))
        self._state = None
        self._compiled = False

    def where(self) -> tuple[int, str]:
        """(process id, host name) of this actor."""
        return os.getpid(), socket.gethostname()

    def _guarded(self, function, *args):
        import jax

        from heron.envs.gym_env import GymEnv

        self._errors.last = None
        GymEnv.take_failure()
        try:
            return jax.device_get(function(*args))
        except Exception as error:
            original = self._errors.last or GymEnv.take_failure()
            raise EnvironmentFailure(describe(error, original)) from None

    def init(self, agent_state, key):
        """Fresh environments whose first step the agent acted on: (snapshot, steps [n, 1])."""
        self._state, steps = self._guarded(self._init, agent_state, key)
        return self._state, steps

    def restore(self, snapshot, agent_state, key):
        """Continues from ``snapshot`` (Gymnasium environments, whose state it cannot hold,
        start fresh episodes); returns the state it continues from."""
        self._state = self._guarded(self._restart, agent_state, snapshot, key)
        return self._state

    def unroll(self, agent_state, key, version: int) -> Unroll:
        """``unroll_length`` steps of every environment, acted on with ``agent_state``."""
        if self._state is None:
            raise EnvironmentFailure("the actor was asked for an unroll before its state was set")
        tick = time.perf_counter()
        state, steps = self._guarded(self._collect, agent_state, self._state, key)
        self._state = state
        compiled, self._compiled = not self._compiled, True
        return Unroll(steps, state, version, time.perf_counter() - tick, compiled)

    def empty(self, payload=None) -> None:
        """Does nothing: a round trip's cost (benchmarks)."""
        return None
