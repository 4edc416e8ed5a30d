"""What each test costs in programs: JAX's own timing events (tracing, lowering to MLIR, XLA
compilation, persistent-cache hits), counted per test and reported at the end of the run.

The suite is compile-bound, so "how many programs did this test compile, and for how long"
is the figure that says where its time goes; ``--durations`` says how long, this says why.
Each test's counts travel with its report (``user_properties``, also in ``--junitxml``);
the controller adds them up per module and prints the costliest ones.
"""

from __future__ import annotations

import collections
import os
import threading

import jax
import pytest
from jax import monitoring

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND = "/jax/core/compile/backend_compile_duration"  # XLA, or a persistent-cache read
CACHE_HIT = "/jax/compilation_cache/cache_hits"
FIELDS = ("traces", "trace_s", "lowerings", "lower_s", "backend", "backend_s", "cache_hits")

# HERON_TEST_COMPILE_LOG=FILE: one line per program XLA compiled or read from the cache
# (seconds, cache hit or XLA, fast or full optimisations, function, test), for finding
# what a test compiles.
LOG = os.environ.get("HERON_TEST_COMPILE_LOG")

_lock = threading.Lock()
_totals = dict.fromkeys(FIELDS, 0.0)
_current = {"test": "(collection)", "hit": False}


def _on_duration(event: str, seconds: float, fun_name: str = "?", **_) -> None:
    names = {TRACE: ("traces", "trace_s"), LOWER: ("lowerings", "lower_s"),
             BACKEND: ("backend", "backend_s")}.get(event)  # fmt: skip
    if names is None:
        return
    with _lock:
        _totals[names[0]] += 1
        _totals[names[1]] += seconds
        hit, _current["hit"] = _current["hit"], False
    if LOG and event == BACKEND:
        flags = "fast" if jax.config.read("jax_disable_most_optimizations") else "full"
        with open(LOG, "a") as f:
            line = f"{seconds:8.3f} {'hit' if hit else 'xla'} {flags} {fun_name} {_current['test']}"
            f.write(line + "\n")


def _on_event(event: str, **_) -> None:
    if event == CACHE_HIT:
        with _lock:
            _totals["cache_hits"] += 1
            _current["hit"] = True


monitoring.register_event_duration_secs_listener(_on_duration)
monitoring.register_event_listener(_on_event)


def _snapshot() -> dict:
    with _lock:
        return dict(_totals)


_STARTED = pytest.StashKey[dict]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_STARTED] = _snapshot()
    _current["test"] = item.nodeid
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The call phase's report carries the counts of setup and call (fixtures included)."""
    if call.when == "call" and _STARTED in item.stash:
        now, started = _snapshot(), item.stash[_STARTED]
        for name in FIELDS:
            value = now[name] - started[name]
            item.user_properties.append((f"jax_{name}", round(value, 3)))
    yield


_per_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    counts = {k.removeprefix("jax_"): v for k, v in report.user_properties if k.startswith("jax_")}
    module = report.nodeid.split("::", 1)[0]
    _per_module[module].update(counts)
    _per_module[module]["tests"] += 1
    _per_module[module]["wall_s"] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _per_module:
        return
    write = terminalreporter.write_line
    total = sum(_per_module.values(), collections.Counter())
    compiled = total["backend"] - total["cache_hits"]
    terminalreporter.section("programs (JAX's timing events, summed over workers)")
    write(
        f"{int(total['traces'])} traces ({total['trace_s']:.0f} s), "
        f"{int(total['lowerings'])} lowerings ({total['lower_s']:.0f} s), "
        f"{int(compiled)} XLA compilations and {int(total['cache_hits'])} persistent-cache "
        f"hits ({total['backend_s']:.0f} s)"
    )
    write(f"{'module':<36} {'tests':>5} {'call s':>7} {'traces':>6} {'compiled':>8} {'XLA s':>6}")
    ranked = sorted(_per_module.items(), key=lambda kv: -kv[1]["wall_s"])
    for module, c in ranked[:15]:
        write(
            f"{module:<36} {int(c['tests']):>5} {c['wall_s']:>7.0f} {int(c['traces']):>6} "
            f"{int(c['backend'] - c['cache_hits']):>8} {c['backend_s']:>6.0f}"
        )
