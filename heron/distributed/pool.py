"""The driver's side of the actors: starting them, asking them for unrolls, restoring them.

``ActorPool`` lives in the learner's process and is reached from the compiled training
iteration through host callbacks (``heron.distributed.source``). It holds the Ray handles,
the parameters published for the actors (one object per version, passed by reference with
every request), the latest snapshot of every actor, and the run's fault counters.

Synchronous driver: each ``collect`` sends every actor one request and waits for all of
them (with ``policy_lag`` 1, it returns the unrolls requested by the previous ``collect``
and sends the next requests before the learner updates). Asynchronous driver: a pump
thread keeps every actor busy; an actor holds at most one finished unroll the learner has
not taken and one in progress (memory does not grow with the run); ``collect`` takes the
``learn_queue_cap`` oldest finished unrolls, from as many actors.

Faults: an actor that dies, raises, or stays silent past ``unroll_timeout_s`` is restarted
(Ray restarts its process), restored from its latest snapshot and sent the same request
again, so a synchronous run with JAX environments ends as if nothing had happened. Past
``max_actor_restarts`` restarts of one actor the run stops with ``ActorFailure``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from typing import Any, NamedTuple

import jax
import numpy as np

from heron.distributed import cluster
from heron.distributed.options import ASYNC, DistConfig
from heron.distributed.worker import EnvironmentFailure, Unroll, Worker, WorkerSpec
from heron.training.driver import TrainingError

RESTARTS, LOST, DROPPED = range(3)  # the fault counters' positions


class ActorFailure(TrainingError):
    """An actor failed more often than the run allows (the last checkpoint is kept)."""


class Taken(NamedTuple):
    """What one ``collect`` hands the learner (numpy; U unrolls of U distinct actors)."""

    steps: Any  # leaves [U, envs_per_actor, T, ...]
    actors: np.ndarray  # int32 [U]
    leads: Any  # leaves [U, envs_per_actor, 1, ...]: the step in front of each unroll
    snapshots: Any  # leaves [A, ...]: each actor's state after its newest unroll taken
    next_unroll: np.ndarray  # int32 [A]: index of each actor's next unroll
    taken: np.ndarray  # int32 [A]: unrolls of each actor the learner took
    counters: np.ndarray  # int32 [3]: restarts, unrolls lost, unrolls dropped (the run's)
    lag: np.ndarray  # float32 [2]: policy lag of these unrolls, mean and max


@dataclasses.dataclass
class _Request:
    actor: int
    index: int  # the actor's unroll index
    key: np.ndarray  # uint32 [2]
    version: int
    params: Any  # ObjectRef of the agent state that acts
    ref: Any = None  # ObjectRef of the Unroll
    sent: float = 0.0


def _stack(trees):
    return jax.tree.map(lambda *xs: np.stack(xs), *trees)


def _request_key(base: np.ndarray, actor: int, index: int, purpose: int = 0) -> np.ndarray:
    """A key (uint32 [2]) for an asynchronous request (``purpose`` 0) or a restore after a
    resume (1), from the run's key, the actor and its unroll index, derived on the host (no
    JAX call from a callback or the pump thread)."""
    seed = np.random.SeedSequence([int(base[0]), int(base[1]), actor, index, purpose])
    return seed.generate_state(2, np.uint32)


class _QuietCallbackLog(logging.Filter):
    """Keeps JAX from logging a traceback for an actor failure: heron reports it in one
    line."""

    def filter(self, record):
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, ActorFailure | cluster.RayUnavailableError)


_callback_log = logging.getLogger("jax._src.callback")
_callback_log.addFilter(_QuietCallbackLog())


class ActorPool:
    """The actors of one run (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, actors: int, dist: DistConfig, address, env_is_jax):
        self.spec, self.count, self.dist, self.address = spec, actors, dist, address
        self.env_is_jax = env_is_jax
        self.handles: list = []
        self.pids: list[int] = []
        self.failure: BaseException | None = None
        self._connected = False
        self._cond = threading.Condition()
        self._pump_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reset_run(np.zeros(actors, np.int32), np.zeros(actors, np.int32), np.zeros(3))

    def _reset_run(self, next_unroll, taken, counters) -> None:
        a = self.count
        self.next_unroll = np.asarray(next_unroll, np.int32).copy()
        self.taken = np.asarray(taken, np.int32).copy()
        self.counters = np.asarray(counters, np.int32).copy()
        self.restarts = [0] * a  # this process's restarts of each actor
        self.latest: list = [None] * a  # snapshot after each actor's newest finished unroll
        self.consumed: list = [None] * a  # snapshot after its newest unroll taken or dropped
        self.steps, self.seconds = [0] * a, [0.0] * a
        self.pending: list[_Request] | None = None  # sync, policy lag 1: requests in flight
        self.inflight: list[_Request | None] = [None] * a  # async
        self.outbox: list[tuple | None] = [None] * a  # async: (request, unroll, arrival)
        self.arrivals = 0
        self.sent = self.next_unroll.copy()  # async: index of each actor's next request
        self.params = None  # async: (version, ref) of the newest parameters
        self.base_key = np.zeros(2, np.uint32)

    # ----------------------------------------------------------------- processes

    def start(self) -> None:
        """Connects to Ray and starts the actor processes (once)."""
        if self.handles:
            return
        self._connected = cluster.connect(self.address, self.count)
        import ray

        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < self.count:
            raise cluster.RayUnavailableError(
                f"actors={self.count} need {self.count} CPUs; the Ray cluster has {cpus:g}"
            )
        remote = ray.remote(Worker).options(
            num_cpus=1,
            max_restarts=-1,  # heron counts restarts itself (dist.max_actor_restarts)
            max_task_retries=0,
        )
        self.handles = [remote.remote(self.spec) for _ in range(self.count)]
        try:
            where = ray.get(
                [h.where.remote() for h in self.handles], timeout=self.dist.unroll_timeout_s
            )
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise cluster.RayUnavailableError(
                f"the Ray cluster did not start {self.count} actors within "
                f"dist.unroll_timeout_s={self.dist.unroll_timeout_s:g}s"
            ) from None
        except ray.exceptions.RayError as error:
            self.close()
            raise ActorFailure(f"an actor (env {self.spec.env}) {self._reason(error)[0]}") from None
        self.pids = [pid for pid, _ in where]
        listed = ", ".join(f"{a}: pid {pid} on {host}" for a, (pid, host) in enumerate(where))
        print(f"heron: {self.count} actors on Ray ({listed})", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stops the pump, ends the actors and disconnects from what this pool connected."""
        self._stop.set()
        if self._pump_thread is not None:
            self._pump_thread.join(timeout=30)
            self._pump_thread = None
        if self.handles:
            import ray

            for handle in self.handles:
                ray.kill(handle, no_restart=True)
            self.handles = []
        if self._connected:
            cluster.disconnect()
            self._connected = False
        self._stop = threading.Event()

    def steps_per_s(self) -> list[float]:
        return [
            round(steps / seconds, 1) if seconds else 0.0
            for steps, seconds in zip(self.steps, self.seconds, strict=True)
        ]

    # ----------------------------------------------------------------- callbacks

    def _guarded(self, function, *args):
        """Runs a callback's work; a failure is kept (heron reports it after the iteration
        fails) and stops every later callback."""
        if self.failure is not None:
            raise self.failure
        try:
            return function(*args)
        except (ActorFailure, cluster.RayUnavailableError) as error:
            self.failure = error
            raise

    def init(self, agent_state, keys, lagged_keys):
        """Every actor's fresh environments: (snapshots [A], first steps [A, n, 1])."""
        return self._guarded(self._init, agent_state, keys, lagged_keys)

    def _init(self, agent_state, keys, lagged_keys):
        import ray

        self.start()
        self._reset_run(np.zeros(self.count), np.zeros(self.count), np.zeros(3))
        self.base_key = np.asarray(keys[0], np.uint32)
        params = ray.put(agent_state)
        results = []
        for a, handle in enumerate(self.handles):
            try:
                results.append(ray.get(handle.init.remote(params, keys[a])))
            except ray.exceptions.RayError as error:
                raise ActorFailure(
                    f"actor {a} (env {self.spec.env}) could not start its environments: "
                    f"{self._reason(error)[0]}"
                ) from None
        snapshots = [snapshot for snapshot, _ in results]
        self.latest, self.consumed = list(snapshots), list(snapshots)
        if lagged_keys is not None:
            self.pending = self._send_all(params, lagged_keys, 0)
        if self.dist.driver == ASYNC:
            self._start_pump(params, 0)
        return _stack(snapshots), _stack([steps for _, steps in results])

    def restore(self, snapshots, next_unroll, taken, counters, version, key, agent_state,
                lagged):  # fmt: skip
        """A resumed run's actors, from the snapshots of its checkpoint: returns the
        snapshots they continue from (Gymnasium environments start fresh episodes)."""
        return self._guarded(
            self._restore, snapshots, next_unroll, taken, counters, version, key, agent_state,
            lagged,
        )  # fmt: skip

    def _restore(self, snapshots, next_unroll, taken, counters, version, key, agent_state,
                 lagged):  # fmt: skip
        import ray

        self.start()
        self._reset_run(next_unroll, taken, counters)
        self.base_key = np.asarray(key, np.uint32)
        params = ray.put(agent_state)
        restored = []
        for a, handle in enumerate(self.handles):
            snapshot = jax.tree.map(lambda x, a=a: x[a], snapshots)
            restart_key = _request_key(self.base_key, a, int(self.next_unroll[a]), purpose=1)
            restored.append(ray.get(handle.restore.remote(snapshot, params, restart_key)))
        self.latest, self.consumed = list(restored), list(restored)
        if lagged is not None:
            lagged_state, lagged_keys, lagged_version = lagged
            self.pending = self._send_all(ray.put(lagged_state), lagged_keys, int(lagged_version))
        if self.dist.driver == ASYNC:
            self._start_pump(params, int(version))
        return _stack(restored)

    def collect_sync(self, agent_state, keys, version):
        """One unroll of every actor, made with ``agent_state`` (version ``version``)."""
        return self._guarded(self._collect_sync, agent_state, keys, int(version))

    def _collect_sync(self, agent_state, keys, version):
        import ray

        params = ray.put(agent_state)
        if self.pending is None:  # no overlap: this iteration's requests, awaited
            done = self._gather(self._send_all(params, keys, version))
        else:  # policy lag 1: the previous requests, then the next ones go out
            done = self._gather(self.pending)
            self.pending = self._send_all(params, keys, version)
        leads = [self._take(request, unroll) for request, unroll in done]
        return self._taken(done, leads, version)

    def collect_async(self, agent_state, version):
        """The ``learn_queue_cap`` oldest finished unrolls, from as many actors."""
        return self._guarded(self._collect_async, agent_state, int(version))

    # ----------------------------------------------------------------- synchronous

    def _send(self, params, actor: int, index: int, key, version: int) -> _Request:
        request = _Request(actor, index, np.asarray(key, np.uint32), version, params)
        request.ref = self.handles[actor].unroll.remote(params, request.key, version)
        request.sent = time.monotonic()
        return request

    def _send_all(self, params, keys, version: int) -> list[_Request]:
        return [
            self._send(params, a, int(self.next_unroll[a]), keys[a], version)
            for a in range(self.count)
        ]

    def _gather(self, requests: list[_Request]) -> list[tuple[_Request, Unroll]]:
        """Waits for every request, restarting and re-asking actors that fail; results in
        the order of ``requests``."""
        import ray

        done: dict[int, Unroll] = {}
        waiting = {request.ref: request for request in requests}
        while waiting:
            oldest = min(waiting.values(), key=lambda r: r.sent)
            timeout = max(0.0, oldest.sent + self.dist.unroll_timeout_s - time.monotonic())
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=timeout)
            if not ready:
                del waiting[oldest.ref]
                silent = (
                    f"sent no unroll within dist.unroll_timeout_s={self.dist.unroll_timeout_s:g}s"
                )
                self._recover(oldest, silent, kill=True)
                waiting[oldest.ref] = oldest
                continue
            request = waiting.pop(ready[0])
            try:
                unroll = ray.get(request.ref)
            except ray.exceptions.RayError as error:
                self._recover(request, *self._reason(error))
                waiting[request.ref] = request
                continue
            self._finished(request, unroll)
            done[request.actor] = unroll
        return [(request, done[request.actor]) for request in requests]

    def _finished(self, request: _Request, unroll: Unroll) -> None:
        a = request.actor
        self.latest[a] = unroll.snapshot
        if not unroll.compiled:  # steps per second after compilation
            self.steps[a] += self.spec.envs_per_actor * jax.tree.leaves(unroll.steps)[0].shape[1]
            self.seconds[a] += unroll.seconds

    def _take(self, request: _Request, unroll: Unroll):
        """Marks ``unroll`` taken (or dropped); returns the step in front of it [n, 1]: the
        last step of the actor's previous unroll, whether that one was trained on or not."""
        a = request.actor
        lead = jax.tree.map(lambda x: x[:, None], self.consumed[a].pending)
        self.consumed[a] = unroll.snapshot
        self.next_unroll[a] = request.index + 1
        return lead

    def _taken(self, done, leads, version: int) -> Taken:
        lags = np.asarray([version - unroll.version for _, unroll in done], np.float32)
        for request, _ in done:
            self.taken[request.actor] += 1
        return Taken(
            steps=_stack([unroll.steps for _, unroll in done]),
            actors=np.asarray([request.actor for request, _ in done], np.int32),
            leads=_stack(leads),
            snapshots=_stack(self.consumed),
            next_unroll=self.next_unroll.copy(),
            taken=self.taken.copy(),
            counters=self.counters.copy(),
            lag=np.asarray([lags.mean(), lags.max()], np.float32),
        )

    # ----------------------------------------------------------------- faults

    @staticmethod
    def _reason(error) -> tuple[str, bool]:
        """(what happened, in one line; whether the actor's process may still be alive)."""
        import ray

        if isinstance(error, ray.exceptions.RayTaskError):
            cause = getattr(error, "cause", None)
            if isinstance(cause, EnvironmentFailure):
                return f"raised {cause}", True
            text = " ".join(str(cause or error).split())
            return f"raised {type(cause or error).__name__}: {text[:300]}", True
        if isinstance(error, ray.exceptions.RayActorError):
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            if "creation task" in str(error) and lines:  # its __init__ raised: say what
                return f"could not start: {lines[-1]}", False
            return "died (its process ended)", False
        if isinstance(error, ray.exceptions.GetTimeoutError):
            return "did not answer in time", True
        return f"failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}", True

    def _recover(self, request: _Request, reason: str, kill: bool) -> None:
        """Restarts ``request``'s actor, restores its latest snapshot and sends the request
        again; ActorFailure past ``max_actor_restarts`` restarts of that actor."""
        import ray

        a, limit = request.actor, self.dist.max_actor_restarts
        while True:
            self.restarts[a] += 1
            self.counters[RESTARTS] += 1
            if self.restarts[a] > limit:
                raise ActorFailure(
                    f"actor {a} (env {self.spec.env}) {reason}; it failed "
                    f"{self.restarts[a]} times, more than dist.max_actor_restarts={limit}: "
                    "training stopped, the last checkpoint is kept (heron train --resume "
                    "continues it)"
                )
            fresh = "" if self.env_is_jax else " (its Gymnasium environments start fresh episodes)"
            print(
                f"heron: actor {a} {reason}: restart {self.restarts[a]} of {limit}, from its "
                f"latest snapshot{fresh}",
                file=sys.stderr,
                flush=True,
            )
            handle = self.handles[a]
            if kill:  # a fresh process: the old one's environments may be broken
                ray.kill(handle, no_restart=False)
            if not self._back(a):
                reason, kill = "did not come back after a restart", True
                continue
            try:
                ray.get(
                    handle.restore.remote(self.latest[a], request.params, request.key),
                    timeout=self.dist.unroll_timeout_s,
                )
                break
            except ray.exceptions.RayError as error:
                reason, alive = self._reason(error)
                kill = alive
        request.ref = handle.unroll.remote(request.params, request.key, request.version)
        request.sent = time.monotonic()

    def _back(self, actor: int) -> bool:
        """Waits until Ray has restarted ``actor`` in a new process (at most
        ``unroll_timeout_s``); records its process id."""
        import ray

        deadline = time.monotonic() + self.dist.unroll_timeout_s
        while time.monotonic() < deadline:
            try:
                pid, _ = ray.get(
                    self.handles[actor].where.remote(), timeout=deadline - time.monotonic()
                )
            except ray.exceptions.GetTimeoutError:
                return False
            except ray.exceptions.RayActorError:  # still restarting
                time.sleep(0.2)
                continue
            if pid != self.pids[actor]:
                self.pids[actor] = pid
                return True
            time.sleep(0.2)  # the old process has not ended yet
        return False

    # ----------------------------------------------------------------- asynchronous

    def _start_pump(self, params, version: int) -> None:
        self.params = (version, params)
        self._stop.clear()
        self._pump_thread = threading.Thread(target=self._pump, name="heron-actors", daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        """Keeps every actor busy: sends a request to each idle actor, moves finished unrolls
        to their actor's outbox while it has room, restarts actors that fail."""
        try:
            while not self._stop.is_set():
                self._pump_once()
        except Exception as error:  # noqa: BLE001 - handed to the learner's next collect
            with self._cond:
                self.failure = (
                    error
                    if isinstance(error, ActorFailure)
                    else ActorFailure(f"the actors' pump failed: {type(error).__name__}: {error}")
                )
                self._cond.notify_all()

    def _pump_once(self) -> None:
        import ray

        with self._cond:
            version, params = self.params
            for a in range(self.count):
                if self.inflight[a] is None:
                    index = int(self.sent[a])
                    key = _request_key(self.base_key, a, index)
                    self.inflight[a] = self._send(params, a, index, key, version)
                    self.sent[a] += 1
            fetchable = [r for a, r in enumerate(self.inflight) if self.outbox[a] is None]
        if not fetchable:
            with self._cond:
                self._cond.wait(timeout=0.05)
            return
        ready, _ = ray.wait([r.ref for r in fetchable], num_returns=1, timeout=0.05)
        now = time.monotonic()
        for request in fetchable:
            if request.ref in ready:
                try:
                    unroll = ray.get(request.ref)
                except ray.exceptions.RayError as error:
                    self._recover(request, *self._reason(error))
                    continue
                with self._cond:
                    self._finished(request, unroll)
                    self.outbox[request.actor] = (request, unroll, self.arrivals)
                    self.arrivals += 1
                    self.inflight[request.actor] = None
                    self._cond.notify_all()
            elif now - request.sent > self.dist.unroll_timeout_s:
                silent = (
                    f"sent no unroll within dist.unroll_timeout_s={self.dist.unroll_timeout_s:g}s"
                )
                self._recover(request, silent, kill=True)

    def _collect_async(self, agent_state, version: int) -> Taken:
        import ray

        params = ray.put(agent_state)
        chosen: list[tuple[_Request, Unroll]] = []
        leads = []
        with self._cond:
            self.params = (version, params)
            while len(chosen) < self.dist.learn_queue_cap:
                if self.failure is not None:
                    raise self.failure
                picked = {request.actor for request, _ in chosen}
                waiting = [box for a, box in enumerate(self.outbox) if box and a not in picked]
                if not waiting:
                    self._cond.wait(timeout=1.0)
                    continue
                request, unroll, _ = min(waiting, key=lambda box: box[2])
                self.outbox[request.actor] = None
                lead = self._take(request, unroll)
                self._cond.notify_all()
                limit = self.dist.max_policy_lag
                if limit is not None and version - unroll.version > limit:
                    self.counters[DROPPED] += 1  # its last step still leads the actor's next
                    continue
                chosen.append((request, unroll))
                leads.append(lead)
        return self._taken(chosen, leads, version)
