"""Connecting to Ray: a local instance on 127.0.0.1 that heron starts (and stops), or an
existing cluster by address. Ray is imported here and nowhere before a run asks for it."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import warnings

from heron.configs import ConfigError

LOCAL_OBJECT_STORE_BYTES = 512 * 1024**2  # a fixed object store for the local instance
# A local instance's GCS must not declare its own node dead while the machine is busy (an
# actor restarting compiles its programs on every core): Ray's default gives a raylet
# about 30 s of missed health checks, after which every process of the node is ended, the
# run's own included. On one machine a node that stopped answering is gone anyway.
LOCAL_SYSTEM_CONFIG = {
    "health_check_period_ms": 5_000,
    "health_check_timeout_ms": 30_000,
    "health_check_failure_threshold": 60,
}


class RayUnavailableError(ConfigError):
    """Ray is not installed, or the cluster cannot be reached or cannot host the run."""


def require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RayUnavailableError(
            "--actors runs actors on Ray, which is not installed: pip install 'heron[ray]' "
            "(ray==2.60.0)"
        ) from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connection to ``host:port`` (``auto`` is left to Ray), or a one-line error."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailableError(
            f"ray_address must be host:port of a Ray head (or auto), got {address!r}"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RayUnavailableError(
            f"cannot reach the Ray cluster at {address!r}: {reason}; start it with "
            "`ray start --head` or drop --ray-address to run a local instance"
        ) from None
    if not address.startswith("ray://"):
        _check_answers_as_ray(address, timeout_s)


def _check_answers_as_ray(address: str, timeout_s: float) -> None:
    """Whether the server at ``address`` answers as a Ray head (its GCS gives its cluster
    id): Ray itself retries for about 30 s, logging a line a second, before it gives up."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    not_ray = (
        grpc.StatusCode.UNIMPLEMENTED,  # a server of another kind (e.g. HTTP's 404)
        grpc.StatusCode.UNAVAILABLE,  # no gRPC server there
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )  # any other answer (e.g. Ray's own token authentication refusing us) is a Ray head's
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
        except grpc.RpcError as error:
            if error.code() not in not_ray:
                return
            details = " ".join((error.details() or str(error.code())).split())
            raise RayUnavailableError(
                f"{address!r} answers, but not as a Ray head ({details}); give the address "
                "of one (`ray start --head` prints it) or drop --ray-address to run a local "
                "instance"
            ) from None


def connect(address: str | None, cpus: int) -> bool:
    """Connects this process to Ray: to ``address``, or to a new local instance bound to
    127.0.0.1 with ``cpus`` CPUs (at least this machine's) and a fixed object store. Returns
    whether this call connected (then ``disconnect`` undoes it); a process already connected
    (a notebook, a test fixture) is used as it is."""
    require_ray()
    import ray

    if address is not None:
        check_reachable(address)
    if ray.is_initialized():
        return False
    with _quiet_start():
        return _connect(ray, address, cpus)


@contextlib.contextmanager
def _quiet_start():
    """Ray's start-up notes are not heron's to print: Python's warning that starting its
    processes forks a multithreaded process (they exec at once), and the token
    authentication note."""
    ray_log = logging.getLogger("ray")
    level = ray_log.level
    ray_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            yield
    finally:
        ray_log.setLevel(level)


_LOOPBACK_SETTING = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> None:
    """Makes the next local Ray instance bind every server (GCS, raylet, workers, agents)
    to 127.0.0.1 only. Ray binds to loopback when it takes the node's address to be
    127.0.0.1, and it reads that choice from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` once, at
    import: so the variable is set for the processes Ray starts, and the constant for this
    process, which may have imported Ray before (a user's notebook, a test session); both
    stay set for the rest of the process."""
    os.environ[_LOOPBACK_SETTING] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _connect(ray, address: str | None, cpus: int) -> bool:
    quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
    if address is None:
        loopback_only()
        ray.init(
            num_cpus=max(os.cpu_count() or 1, cpus),
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            _system_config=LOCAL_SYSTEM_CONFIG,
            **quiet,
        )
        errors_to_stderr()
        return True
    try:
        ray.init(address=address, **quiet)
    except Exception as error:  # Ray's own connection errors, in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise RayUnavailableError(
            f"cannot attach to the Ray cluster at {address!r}: {first}"
        ) from None
    errors_to_stderr()
    return True


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def errors_to_stderr() -> None:
    """Ray prints the cluster's error messages (an actor's process died, ...) to this
    process's stdout, which carries heron's JSON line alone: they go to stderr instead, as
    one line each without colour codes (heron reports the failure in its own line)."""
    from ray._private import worker as ray_worker

    if getattr(ray_worker.print_to_stdstream, "heron_stderr", False):
        return
    original = ray_worker.print_to_stdstream

    def print_to_stdstream(data, ignore_prefix):
        if data.get("pid") != "raylet" or data.get("is_err"):
            return original(data, ignore_prefix)
        for message in data.get("lines", []):
            lines = [line.strip() for line in _ANSI.sub("", str(message)).splitlines()]
            first = next((line for line in lines if line), "")
            if first:
                print(f"ray: {first}", file=sys.stderr, flush=True)

    print_to_stdstream.heron_stderr = True
    ray_worker.print_to_stdstream = print_to_stdstream


def disconnect() -> None:
    import ray

    ray.shutdown()
