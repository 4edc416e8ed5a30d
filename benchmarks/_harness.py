"""Process and virtual-environment plumbing for the benchmark scripts (stdlib only)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VENV_STAMP = ".requirements.sha256"


class SetupError(RuntimeError):
    """A peer's environment could not be prepared."""


@dataclass
class ChildResult:
    """Outcome of one timed subprocess.

    ``wall_s`` is the wall clock of the whole process, from spawn to exit.
    ``payload`` is the JSON object of the last stdout line (None if absent).
    """

    argv: list[str]
    wall_s: float
    returncode: int | None
    payload: dict[str, Any] | None
    error: str | None = None
    busy_before: float | None = None
    other_during: float | None = None
    stderr_tail: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        """The record stored in the results file."""
        record: dict[str, Any] = {
            "argv": self.argv,
            "wall_s": self.wall_s,
            "returncode": self.returncode,
            "cpu_busy_before": self.busy_before,
            "cpu_other_during": self.other_during,
            "result": self.payload,
        }
        if self.error:
            record["error"] = self.error
            record["stderr_tail"] = self.stderr_tail
        return record


def _tail(text: str, lines: int = 15) -> str:
    """Last ``lines`` lines of ``text``, without pip's index-location warnings."""
    kept = [ln for ln in text.strip().splitlines() if not ln.startswith("WARNING: Location")]
    return "\n".join(kept[-lines:])


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """Parse the last non-empty stdout line as a JSON object, if it is one."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies summed over the CPUs this process may run on, from /proc/stat:
    a benchmark pinned to some cores (``taskset``) is disturbed only by load on those."""
    cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
    busy = total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *values = line.split()
            if name in cpus:
                fields = [int(x) for x in values]
                idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
                busy, total = busy + sum(fields) - idle, total + sum(fields)
    return busy, total


def cpu_busy_fraction(interval_s: float = 0.5) -> float | None:
    """Fraction of this process's CPUs busy over ``interval_s`` (None off Linux).

    Called while the benchmark itself is idle, so it measures other load on
    the machine that would disturb the timings.
    """
    try:
        busy0, total0 = _cpu_times()
        time.sleep(interval_s)
        busy1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return (busy1 - busy0) / max(total1 - total0, 1)


class OtherLoad:
    """Measures the CPU share used by processes other than our children.

    Busy time of this process's CPUs (/proc/stat) minus the CPU time of the
    children that finished in between (``resource.RUSAGE_CHILDREN``), as a
    fraction of this process's CPUs over the interval. None off Linux.
    """

    def __init__(self) -> None:
        try:
            self._machine = _cpu_times()
        except (OSError, ValueError, IndexError):
            self._machine = None
        self._children = self._children_cpu_s()

    @staticmethod
    def _children_cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def fraction(self) -> float | None:
        if self._machine is None:
            return None
        busy, total = _cpu_times()
        hz = os.sysconf("SC_CLK_TCK")
        machine_busy_s = (busy - self._machine[0]) / hz
        span_s = (total - self._machine[1]) / hz  # wall time x number of CPUs
        children_s = self._children_cpu_s() - self._children
        return max(0.0, machine_busy_s - children_s) / span_s if span_s > 0 else None


def wait_for_idle(max_wait_s: float, threshold: float) -> float | None:
    """Wait up to ``max_wait_s`` for other load to drop below ``threshold``.

    Returns the last busy fraction measured (None off Linux).
    """
    deadline = time.perf_counter() + max_wait_s
    busy = cpu_busy_fraction()
    while busy is not None and busy > threshold and time.perf_counter() < deadline:
        busy = cpu_busy_fraction(2.0)
    return busy


def run_timed(
    argv: list[str], timeout_s: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> ChildResult:
    """Run ``argv`` to completion and time it; never raises for child failures.

    ``env`` holds variables added to this process's environment for the child.
    """
    busy = cpu_busy_fraction()
    other = OtherLoad()
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, **env} if env else None,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        wall = time.perf_counter() - start
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        error = f"timed out after {timeout_s:.0f} s"
        return ChildResult(
            argv, wall, None, None, error, busy_before=busy, stderr_tail=_tail(stderr)
        )
    except OSError as exc:
        return ChildResult(
            argv, time.perf_counter() - start, None, None, str(exc), busy_before=busy
        )
    wall = time.perf_counter() - start
    other_during = other.fraction()
    payload = last_json_line(proc.stdout)
    error = None
    if proc.returncode != 0:
        error = f"exit status {proc.returncode}"
    elif payload is None:
        error = "last stdout line is not a JSON object"
    return ChildResult(
        argv,
        wall,
        proc.returncode,
        payload,
        error,
        busy_before=busy,
        other_during=other_during,
        stderr_tail=_tail(proc.stderr),
    )


def _requirements_digest(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def ensure_venv(venv_dir: Path, requirements: Path, log=print) -> Path:
    """Create (or reuse) ``venv_dir`` with exactly the pinned ``requirements``.

    The venv is reused while the digest stamped in it matches the requirements
    file; otherwise it is rebuilt from scratch. Returns the venv's python.
    Raises SetupError with the reason when creation or installation fails.
    """
    digest = _requirements_digest(requirements)
    stamp = venv_dir / VENV_STAMP
    python = venv_python(venv_dir)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python

    log(f"  creating {venv_dir} from {requirements.name} (one-off, about a minute) ...")
    if venv_dir.exists():
        shutil.rmtree(venv_dir)
    steps = [
        [sys.executable, "-m", "venv", str(venv_dir)],
        [str(python), "-m", "pip", "install", "--quiet", "--no-input", "-r", str(requirements)],
    ]
    for argv in steps:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SetupError(f"{' '.join(argv[:4])}: {exc}") from exc
        if proc.returncode != 0:
            raise SetupError(
                f"{' '.join(argv[:4])} failed (exit {proc.returncode}):\n"
                + _tail(proc.stderr or proc.stdout)
            )
    stamp.write_text(digest + "\n")
    return python
