"""The two ways a run asks its actors (``actors.py``) for unrolls.

``SyncDriver``: each ``collect`` sends every actor one request and waits for all of them
(with ``policy_lag`` 1, it returns the unrolls requested by the previous ``collect`` and
sends the next requests before the learner updates).

``AsyncDriver``: a pump thread keeps every actor busy; an actor holds at most one finished
unroll the learner has not taken and one in progress (memory does not grow with the run);
``collect`` takes the ``learn_queue_cap`` oldest finished unrolls, from as many actors, and
drops those made more than ``max_policy_lag`` versions ago.

Both are started once the actors are ready (``start``), asked by the learner (``collect``)
and stopped before the actors end (``stop``); the actors restart and re-ask on failures.
"""

from __future__ import annotations

import threading
import time

from heron.distributed.actors import DROPPED, ActorFailure, Actors, Request, Taken, request_key
from heron.distributed.worker import Unroll


class SyncDriver:
    """One unroll of every actor per ``collect`` (see the module docstring)."""

    def __init__(self, actors: Actors):
        self.actors = actors
        self.pending: list[Request] | None = None  # policy lag 1: the requests in flight

    def start(self, params, version: int, lagged) -> None:
        """Sends ``lagged`` (ObjectRef of the acting state, keys [A, 2], version) with policy
        lag 1: a run's first requests, or those in flight at its checkpoint. (Every
        ``collect`` brings its parameters: the newest, ``params`` and ``version``, are the
        asynchronous driver's.)"""
        self.pending = None if lagged is None else self._send_all(*lagged)

    def stop(self) -> None:
        """Forgets the requests in flight (their actors are ending)."""
        self.pending = None

    def collect(self, agent_state, keys, version: int) -> Taken:
        """One unroll of every actor, made with ``agent_state`` (version ``version``)."""
        import ray

        params = ray.put(agent_state)
        if self.pending is None:  # no overlap: this iteration's requests, awaited
            done = self._gather(self._send_all(params, keys, version))
        else:  # policy lag 1: the previous requests, then the next ones go out
            done = self._gather(self.pending)
            self.pending = self._send_all(params, keys, version)
        leads = [self.actors.take(request, unroll) for request, unroll in done]
        return self.actors.hand_over(done, leads, version)

    def _send_all(self, params, keys, version: int) -> list[Request]:
        actors = self.actors
        return [
            actors.send(params, a, int(actors.next_unroll[a]), keys[a], version)
            for a in range(actors.count)
        ]

    def _gather(self, requests: list[Request]) -> list[tuple[Request, Unroll]]:
        """Waits for every request (the actors that fail are brought back and asked again);
        results in the order of ``requests``."""
        import ray

        timeout_s = self.actors.dist.unroll_timeout_s
        done: dict[int, Unroll] = {}
        waiting = {request.ref: request for request in requests}
        while waiting:
            oldest = min(waiting.values(), key=lambda r: r.sent)
            timeout = max(0.0, oldest.sent + timeout_s - time.monotonic())
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=timeout)
            if not ready:
                del waiting[oldest.ref]
                self.actors.recover_silent(oldest)
                waiting[oldest.ref] = oldest
                continue
            request = waiting.pop(ready[0])
            unroll = self.actors.receive(request)
            if unroll is None:  # sent again
                waiting[request.ref] = request
                continue
            self.actors.record(request, unroll)
            done[request.actor] = unroll
        return [(request, done[request.actor]) for request in requests]


class AsyncDriver:
    """Actors kept busy by a pump thread (see the module docstring).

    ``_cond`` guards what the pump thread and the learner's share: the requests in flight,
    the outboxes, the newest parameters, ``actors.failure``, and the actors' snapshots as
    unrolls are recorded and taken.
    """

    def __init__(self, actors: Actors):
        self.actors = actors
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._clear()

    def _clear(self) -> None:
        count = self.actors.count
        self.inflight: list[Request | None] = [None] * count
        self.outbox: list[tuple | None] = [None] * count  # (request, unroll, arrival)
        self.arrivals = 0
        self.sent = self.actors.next_unroll.copy()  # index of each actor's next request
        self.params = None  # (version, ObjectRef) of the newest parameters

    def start(self, params, version: int, lagged) -> None:
        """Starts the pump with the newest parameters (``lagged``, policy lag 1, is the
        synchronous driver's: always None here)."""
        self._clear()
        self.params = (version, params)
        self._thread = threading.Thread(target=self._pump, name="heron-actors", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the pump (waiting for it at most 30 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._stop = threading.Event()

    def _pump(self) -> None:
        """Keeps every actor busy: sends a request to each idle actor, moves finished unrolls
        to their actor's outbox while it has room; the actors restart those that fail."""
        try:
            while not self._stop.is_set():
                self._pump_once()
        except Exception as error:  # noqa: BLE001 - handed to the learner's next collect
            with self._cond:
                self.actors.failure = (
                    error
                    if isinstance(error, ActorFailure)
                    else ActorFailure(f"the actors' pump failed: {type(error).__name__}: {error}")
                )
                self._cond.notify_all()

    def _pump_once(self) -> None:
        import ray

        actors = self.actors
        with self._cond:
            version, params = self.params
            for a in range(actors.count):
                if self.inflight[a] is None:
                    index = int(self.sent[a])
                    key = request_key(actors.base_key, a, index)
                    self.inflight[a] = actors.send(params, a, index, key, version)
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
                unroll = actors.receive(request)
                if unroll is None:  # sent again
                    continue
                with self._cond:
                    actors.record(request, unroll)
                    self.outbox[request.actor] = (request, unroll, self.arrivals)
                    self.arrivals += 1
                    self.inflight[request.actor] = None
                    self._cond.notify_all()
            elif now - request.sent > actors.dist.unroll_timeout_s:
                actors.recover_silent(request)

    def collect(self, agent_state, version: int) -> Taken:
        """The ``learn_queue_cap`` oldest finished unrolls, from as many actors; the newest
        parameters become ``agent_state`` (version ``version``)."""
        import ray

        params = ray.put(agent_state)
        dist = self.actors.dist
        chosen: list[tuple[Request, Unroll]] = []
        leads = []
        with self._cond:
            self.params = (version, params)
            while len(chosen) < dist.learn_queue_cap:
                if self.actors.failure is not None:
                    raise self.actors.failure
                picked = {request.actor for request, _ in chosen}
                waiting = [box for a, box in enumerate(self.outbox) if box and a not in picked]
                if not waiting:
                    self._cond.wait(timeout=1.0)
                    continue
                request, unroll, _ = min(waiting, key=lambda box: box[2])
                self.outbox[request.actor] = None
                lead = self.actors.take(request, unroll)
                self._cond.notify_all()
                limit = dist.max_policy_lag
                if limit is not None and version - unroll.version > limit:
                    self.actors.counters[DROPPED] += 1  # its last step still leads the actor's next
                    continue
                chosen.append((request, unroll))
                leads.append(lead)
        return self.actors.hand_over(chosen, leads, version)
