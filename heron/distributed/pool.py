"""The driver's side of the actors: what the training iteration's host callbacks reach.

``ActorPool`` lives in the learner's process and is reached from the compiled training
iteration through host callbacks (``heron.distributed.source``). It joins the run's actors
(``actors.py``: the Ray handles, every actor's latest snapshot, the run's fault counters,
restarts) and the driver that asks them for unrolls (``drivers.py``: synchronous or
asynchronous). The parameters published for the actors travel as one object per version,
passed by reference with every request.

A callback's failure is kept and raised again by every later callback; heron reports it in
one line after the iteration fails.
"""

from __future__ import annotations

import logging

from heron.distributed import cluster
from heron.distributed.actors import ActorFailure, Actors, Taken
from heron.distributed.drivers import AsyncDriver, SyncDriver
from heron.distributed.worker import WorkerSpec
from heron.run_config import ASYNC, DistConfig


class _QuietCallbackLog(logging.Filter):
    """Keeps JAX from logging a traceback for an actor failure: heron reports it in one
    line."""

    def filter(self, record):
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, ActorFailure | cluster.RayUnavailableError)


_callback_log = logging.getLogger("jax._src.callback")
_callback_log.addFilter(_QuietCallbackLog())


class ActorPool:
    """The actors of one run and their driver (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, actors: int, dist: DistConfig, address, env_is_jax):
        self.actors = Actors(spec, actors, dist, address, env_is_jax)
        driver = AsyncDriver if dist.driver == ASYNC else SyncDriver
        self.driver: SyncDriver | AsyncDriver = driver(self.actors)

    def start(self) -> None:
        """Connects to Ray and starts the actor processes (once)."""
        self.actors.start()

    def close(self) -> None:
        """Stops the driver, ends the actors and disconnects from what the pool connected."""
        self.driver.stop()
        self.actors.close()

    @property
    def failure(self) -> BaseException | None:
        return self.actors.failure

    def steps_per_s(self) -> list[float]:
        return self.actors.steps_per_s()

    # ----------------------------------------------------------------- callbacks

    def init(self, agent_state, keys, lagged_keys):
        """Every actor's fresh environments: (snapshots [A], first steps [A, n, 1])."""
        return self.actors.guarded(self._init, agent_state, keys, lagged_keys)

    def _init(self, agent_state, keys, lagged_keys):
        params, snapshots, first = self.actors.init(agent_state, keys)
        self.driver.start(params, 0, None if lagged_keys is None else (params, lagged_keys, 0))
        return snapshots, first

    def restore(self, snapshots, next_unroll, taken, counters, version, key, agent_state,
                lagged):  # fmt: skip
        """A resumed run's actors, from the snapshots of its checkpoint: returns the
        snapshots they continue from (Gymnasium environments start fresh episodes)."""
        return self.actors.guarded(
            self._restore, snapshots, next_unroll, taken, counters, version, key, agent_state,
            lagged,
        )  # fmt: skip

    def _restore(self, snapshots, next_unroll, taken, counters, version, key, agent_state,
                 lagged):  # fmt: skip
        import ray

        params, restored = self.actors.restore(
            snapshots, next_unroll, taken, counters, key, agent_state
        )
        if lagged is not None:
            lagged_state, lagged_keys, lagged_version = lagged
            lagged = (ray.put(lagged_state), lagged_keys, int(lagged_version))
        self.driver.start(params, int(version), lagged)
        return restored

    def collect_sync(self, agent_state, keys, version) -> Taken:
        """One unroll of every actor, made with ``agent_state`` (version ``version``)."""
        return self.actors.guarded(self.driver.collect, agent_state, keys, int(version))

    def collect_async(self, agent_state, version) -> Taken:
        """The ``learn_queue_cap`` oldest finished unrolls, from as many actors."""
        return self.actors.guarded(self.driver.collect, agent_state, int(version))
