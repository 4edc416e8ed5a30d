"""The actors of one run and their faults: starting them, asking them for unrolls, bringing
back those that fail.

``Actors`` lives in the learner's process. It holds the Ray handles, every actor's latest
snapshot and the one after its newest unroll the learner took (the checkpointed one), the
index of each actor's next unroll, the unrolls taken and the run's fault counters. The
drivers (``drivers.py``) choose which unrolls to ask for and when; what a request meets on
its way is handled here: an actor that dies, raises, or stays silent past
``unroll_timeout_s`` is restarted (Ray restarts its process), restored from its latest
snapshot and sent the same request again, so a synchronous run with JAX environments ends
as if nothing had happened. Past ``max_actor_restarts`` restarts of one actor the run stops
with ``ActorFailure``.

``Actors`` takes no lock: the asynchronous driver guards what its pump thread shares with
the learner's thread.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, NamedTuple

import jax
import numpy as np

from heron.distributed import cluster
from heron.distributed.worker import EnvironmentFailure, Unroll, Worker, WorkerSpec
from heron.run_config import DistConfig
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
class Request:
    """One unroll asked of one actor; sent again, as it is, after the actor failed."""

    actor: int
    index: int  # the actor's unroll index
    key: np.ndarray  # uint32 [2]
    version: int
    params: Any  # ObjectRef of the agent state that acts
    ref: Any = None  # ObjectRef of the Unroll
    sent: float = 0.0


def _stack(trees):
    return jax.tree.map(lambda *xs: np.stack(xs), *trees)


def request_key(base: np.ndarray, actor: int, index: int, purpose: int = 0) -> np.ndarray:
    """A key (uint32 [2]) for an asynchronous request (``purpose`` 0) or a restore after a
    resume (1), from the run's key, the actor and its unroll index, derived on the host (no
    JAX call from a callback or the pump thread)."""
    seed = np.random.SeedSequence([int(base[0]), int(base[1]), actor, index, purpose])
    return seed.generate_state(2, np.uint32)


def failure_reason(error) -> tuple[str, bool]:
    """(what happened to an actor, in one line; whether its process may still be alive)."""
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


class Actors:
    """The actor processes of one run and what the learner took from each (see the module
    docstring)."""

    def __init__(self, spec: WorkerSpec, count: int, dist: DistConfig, address, env_is_jax):
        self.spec, self.count, self.dist, self.address = spec, count, dist, address
        self.env_is_jax = env_is_jax
        self.handles: list = []
        self.pids: list[int] = []
        self.failure: BaseException | None = None
        self._connected = False
        self._reset(np.zeros(count), np.zeros(count), np.zeros(3), np.zeros(2))

    def _reset(self, next_unroll, taken, counters, key) -> None:
        a = self.count
        self.next_unroll = np.asarray(next_unroll, np.int32).copy()
        self.taken = np.asarray(taken, np.int32).copy()
        self.counters = np.asarray(counters, np.int32).copy()
        self.base_key = np.asarray(key, np.uint32)
        self.restarts = [0] * a  # this process's restarts of each actor
        self.latest: list = [None] * a  # snapshot after each actor's newest finished unroll
        self.consumed: list = [None] * a  # snapshot after its newest unroll taken or dropped
        self.steps, self.seconds = [0] * a, [0.0] * a

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
            reason = failure_reason(error)[0]
            raise ActorFailure(f"an actor (env {self.spec.env}) {reason}") from None
        self.pids = [pid for pid, _ in where]
        listed = ", ".join(f"{a}: pid {pid} on {host}" for a, (pid, host) in enumerate(where))
        print(f"heron: {self.count} actors on Ray ({listed})", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Ends the actors and disconnects from what ``start`` connected."""
        if self.handles:
            import ray

            for handle in self.handles:
                ray.kill(handle, no_restart=True)
            self.handles = []
        if self._connected:
            cluster.disconnect()
            self._connected = False

    def steps_per_s(self) -> list[float]:
        return [
            round(steps / seconds, 1) if seconds else 0.0
            for steps, seconds in zip(self.steps, self.seconds, strict=True)
        ]

    def guarded(self, function, *args):
        """Runs a host callback's work; a failure is kept (heron reports it after the
        iteration fails) and stops every later callback."""
        if self.failure is not None:
            raise self.failure
        try:
            return function(*args)
        except (ActorFailure, cluster.RayUnavailableError) as error:
            self.failure = error
            raise

    # ----------------------------------------------------------------- a run's start

    def init(self, agent_state, keys):
        """Every actor's fresh environments: (the ObjectRef of ``agent_state``, snapshots
        [A], first steps [A, n, 1])."""
        import ray

        self.start()
        self._reset(np.zeros(self.count), np.zeros(self.count), np.zeros(3), keys[0])
        params = ray.put(agent_state)
        results = []
        for a, handle in enumerate(self.handles):
            try:
                results.append(ray.get(handle.init.remote(params, keys[a])))
            except ray.exceptions.RayError as error:
                raise ActorFailure(
                    f"actor {a} (env {self.spec.env}) could not start its environments: "
                    f"{failure_reason(error)[0]}"
                ) from None
        snapshots = [snapshot for snapshot, _ in results]
        self.latest, self.consumed = list(snapshots), list(snapshots)
        return params, _stack(snapshots), _stack([steps for _, steps in results])

    def restore(self, snapshots, next_unroll, taken, counters, key, agent_state):
        """A resumed run's actors, from the snapshots of its checkpoint: (the ObjectRef of
        ``agent_state``, the snapshots they continue from; Gymnasium environments start
        fresh episodes)."""
        import ray

        self.start()
        self._reset(next_unroll, taken, counters, key)
        params = ray.put(agent_state)
        restored = []
        for a, handle in enumerate(self.handles):
            snapshot = jax.tree.map(lambda x, a=a: x[a], snapshots)
            restart_key = request_key(self.base_key, a, int(self.next_unroll[a]), purpose=1)
            restored.append(ray.get(handle.restore.remote(snapshot, params, restart_key)))
        self.latest, self.consumed = list(restored), list(restored)
        return params, _stack(restored)

    # ----------------------------------------------------------------- requests

    def send(self, params, actor: int, index: int, key, version: int) -> Request:
        request = Request(actor, index, np.asarray(key, np.uint32), version, params)
        self._ask(request)
        return request

    def _ask(self, request: Request) -> None:
        handle = self.handles[request.actor]
        request.ref = handle.unroll.remote(request.params, request.key, request.version)
        request.sent = time.monotonic()

    def receive(self, request: Request) -> Unroll | None:
        """The unroll of a request Ray says is ready, or None when its actor failed instead
        (then the actor is back and the request out again, under a new ``ref``)."""
        import ray

        try:
            return ray.get(request.ref)
        except ray.exceptions.RayError as error:
            self._recover(request, *failure_reason(error))
            return None

    def recover_silent(self, request: Request) -> None:
        """Brings back the actor of a request unanswered for ``unroll_timeout_s`` in a new
        process and sends the request again."""
        reason = f"sent no unroll within dist.unroll_timeout_s={self.dist.unroll_timeout_s:g}s"
        self._recover(request, reason, kill=True)

    def record(self, request: Request, unroll: Unroll) -> None:
        """Keeps a finished unroll's snapshot as its actor's latest (restarts continue from
        it) and counts its steps and time."""
        a = request.actor
        self.latest[a] = unroll.snapshot
        if not unroll.compiled:  # steps per second after compilation
            self.steps[a] += self.spec.envs_per_actor * jax.tree.leaves(unroll.steps)[0].shape[1]
            self.seconds[a] += unroll.seconds

    def take(self, request: Request, unroll: Unroll):
        """Marks ``unroll`` taken (or dropped); returns the step in front of it [n, 1]: the
        last step of the actor's previous unroll, whether that one was trained on or not."""
        a = request.actor
        lead = jax.tree.map(lambda x: x[:, None], self.consumed[a].pending)
        self.consumed[a] = unroll.snapshot
        self.next_unroll[a] = request.index + 1
        return lead

    def hand_over(self, done: list[tuple[Request, Unroll]], leads, version: int) -> Taken:
        """Counts the unrolls ``done`` taken and hands them to the learner with their
        ``leads``, the state a checkpoint keeps, and their lag behind ``version``."""
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

    def _recover(self, request: Request, reason: str, kill: bool) -> None:
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
                reason, alive = failure_reason(error)
                kill = alive
        self._ask(request)

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
