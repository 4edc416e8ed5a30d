"""Replay throughput: heron's ``uniform`` against flashbax's trajectory buffer and a NumPy ring.

Usage (from the repository root)::

    .venv/bin/python benchmarks/replay.py [--envs 16] [--capacity 100000] [--add-length 32]
                                          [--batch 256] [--length 32] [--systems heron,numpy]

The workload: ``--envs`` environments add ``--add-length`` steps each per call into rings of
``--capacity`` steps per environment; the learner samples ``--batch`` sequences of
``--length`` steps, uniformly over valid starts. A step is an Experience-like pytree
(observation float32[17], action float32[6], reward, discount, step_type): 104 bytes.

Each system is measured in its own fresh process:

* heron ``UniformReplay`` (this repository's venv), jitted, ``add`` donating its state;
* flashbax 0.1.3 ``make_trajectory_buffer`` (period 1, same shapes), jitted the same way, in
  ``benchmarks/.venvs/flashbax``, created on first use from
  ``_peers/flashbax-requirements.txt``; if it cannot be installed or does not run, the
  script says why and goes on;
* a plain NumPy ring buffer with the same semantics (written here), as a host baseline.

Figures are transitions per second after compilation, the median of ``--repeats`` passes:
``add`` = one jitted call per add from Python (the whole ring filled once per pass),
``add (scan)`` = the same adds inside one compiled ``lax.scan`` (how a compiled training loop
uses it), ``sample`` = one jitted call per sample. Timings are printed (and stored in
``--out``), never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from _harness import SetupError, ensure_venv, run_timed, wait_for_idle

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
VENVS = BENCH / ".venvs"
FLASHBAX_REQUIREMENTS = BENCH / "_peers" / "flashbax-requirements.txt"
BUSY_WARNING = 0.25  # other processes using this share of the CPUs disturb the timings
SCAN_ADDS = 100  # adds per compiled scan


@dataclass(frozen=True)
class Workload:
    envs: int
    capacity: int
    add_length: int
    batch: int
    length: int
    samples: int
    repeats: int

    @property
    def adds_per_pass(self) -> int:
        """Adds that fill every ring once."""
        return max(self.capacity // self.add_length, 1)


STEP_FIELDS = {  # name: (per-step shape, dtype)
    "observation": ((17,), "float32"),
    "action": ((6,), "float32"),
    "reward": ((), "float32"),
    "discount": ((), "float32"),
    "step_type": ((), "int32"),
}


def step_bytes() -> int:
    sizes = {"float32": 4, "int32": 4}
    total = 0
    for shape, dtype in STEP_FIELDS.values():
        count = 1
        for dim in shape:
            count *= dim
        total += count * sizes[dtype]
    return total


def make_chunk(xp, leading: tuple[int, ...]) -> dict:
    """A chunk of experience with leaves [*leading, *step_shape] (``xp``: numpy or jax.numpy)."""
    return {name: xp.ones(leading + shape, dtype) for name, (shape, dtype) in STEP_FIELDS.items()}


def median_rate(transitions: int, seconds: list[float]) -> float:
    return transitions / statistics.median(seconds)


# --------------------------------------------------------------------------- workers


def time_jax_replay(init, add, sample, w: Workload) -> dict[str, Any]:
    """Time ``add(state, chunk)`` and ``sample(state, key)`` (plain functions) under jit."""
    import jax
    import jax.numpy as jnp

    chunk = make_chunk(jnp, (w.envs, w.add_length))
    state = init(chunk)
    add_jit = jax.jit(add, donate_argnums=0)
    t0 = time.perf_counter()
    state = jax.block_until_ready(add_jit(state, chunk))
    compile_add_s = time.perf_counter() - t0

    add_s = []
    for _ in range(w.repeats):
        t0 = time.perf_counter()
        for _ in range(w.adds_per_pass):
            state = add_jit(state, chunk)
        jax.block_until_ready(state)
        add_s.append(time.perf_counter() - t0)

    def add_many(state, chunks):
        return jax.lax.scan(lambda s, c: (add(s, c), None), state, chunks)[0]

    chunks = make_chunk(jnp, (SCAN_ADDS, w.envs, w.add_length))
    scan_jit = jax.jit(add_many, donate_argnums=0)
    state = jax.block_until_ready(scan_jit(state, chunks))
    scan_s = []
    for _ in range(w.repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(scan_jit(state, chunks))
        scan_s.append(time.perf_counter() - t0)

    sample_jit = jax.jit(sample)
    keys = jax.random.split(jax.random.key(0), w.samples)
    t0 = time.perf_counter()
    jax.block_until_ready(sample_jit(state, keys[0]))
    compile_sample_s = time.perf_counter() - t0
    sample_s = []
    for _ in range(w.repeats):
        t0 = time.perf_counter()
        for key in keys:
            batch = sample_jit(state, key)
        jax.block_until_ready(batch)
        sample_s.append(time.perf_counter() - t0)

    per_add = w.envs * w.add_length
    return {
        "add_per_s": median_rate(w.adds_per_pass * per_add, add_s),
        "add_scan_per_s": median_rate(SCAN_ADDS * per_add, scan_s),
        "sample_per_s": median_rate(w.samples * w.batch * w.length, sample_s),
        "compile_add_s": compile_add_s,
        "compile_sample_s": compile_sample_s,
        "device": str(jax.devices()[0].platform),
    }


def worker_heron(w: Workload) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import jax

    from heron.replay import UniformReplay

    replay = UniformReplay(w.envs, w.capacity, w.batch, w.length)
    result = time_jax_replay(
        lambda chunk: replay.init(jax.tree.map(lambda x: x[:, 0], chunk)),
        replay.add,
        lambda s, k: replay.sample(s, k)[0],
        w,
    )
    return {**result, "versions": {"jax": jax.__version__}}


def worker_flashbax(w: Workload) -> dict[str, Any]:
    import flashbax
    import jax
    import jax.numpy as jnp

    buffer = flashbax.make_trajectory_buffer(
        add_batch_size=w.envs,
        sample_batch_size=w.batch,
        sample_sequence_length=w.length,
        period=1,
        min_length_time_axis=w.length,
        max_length_time_axis=w.capacity,
    )
    result = time_jax_replay(
        lambda chunk: buffer.init(make_chunk(jnp, ())),
        buffer.add,
        lambda s, k: buffer.sample(s, k).experience,
        w,
    )

    return {
        **result,
        "versions": {"jax": jax.__version__, "flashbax": metadata.version("flashbax")},
    }


class NumpyRing:
    """Plain NumPy rings [envs, capacity, ...] with heron's semantics (host baseline)."""

    def __init__(self, w: Workload):
        import numpy as np

        self.np, self.w = np, w
        self.data = make_chunk(np, (w.envs, w.capacity))
        self.head = self.size = 0
        self.rng = np.random.default_rng(0)

    def add(self, chunk: dict) -> None:
        steps = self.w.add_length
        slots = (self.head + self.np.arange(steps)) % self.w.capacity
        for name, ring in self.data.items():
            ring[:, slots] = chunk[name]
        self.head = (self.head + steps) % self.w.capacity
        self.size = min(self.size + steps, self.w.capacity)

    def sample(self) -> dict:
        w, np = self.w, self.np
        env = self.rng.integers(0, w.envs, w.batch)
        start = self.rng.integers(0, self.size - w.length + 1, w.batch)
        oldest = (self.head - self.size) % w.capacity
        slots = (oldest + start[:, None] + np.arange(w.length)) % w.capacity
        return {name: ring[env[:, None], slots] for name, ring in self.data.items()}


def worker_numpy(w: Workload) -> dict[str, Any]:
    import numpy as np

    ring = NumpyRing(w)
    chunk = make_chunk(np, (w.envs, w.add_length))
    add_s, sample_s = [], []
    for _ in range(w.repeats):
        t0 = time.perf_counter()
        for _ in range(w.adds_per_pass):
            ring.add(chunk)
        add_s.append(time.perf_counter() - t0)
    for _ in range(w.repeats):
        t0 = time.perf_counter()
        for _ in range(w.samples):
            ring.sample()
        sample_s.append(time.perf_counter() - t0)
    return {
        "add_per_s": median_rate(w.adds_per_pass * w.envs * w.add_length, add_s),
        "add_scan_per_s": None,
        "sample_per_s": median_rate(w.samples * w.batch * w.length, sample_s),
        "compile_add_s": None,
        "compile_sample_s": None,
        "device": "cpu (numpy)",
        "versions": {"numpy": np.__version__},
    }


WORKERS = {"heron": worker_heron, "flashbax": worker_flashbax, "numpy": worker_numpy}

# --------------------------------------------------------------------------- orchestration


def log(message: str) -> None:
    print(message, flush=True)


def run_worker(python: str, system: str, w: Workload, args) -> dict[str, Any]:
    """One fresh process measuring ``system``; returns its record (``error`` on failure)."""
    if args.wait_idle > 0:
        wait_for_idle(args.wait_idle, BUSY_WARNING)
    argv = [python, str(Path(__file__).resolve()), "--worker", system]
    argv += ["--workload", json.dumps(asdict(w))]
    child = run_timed(argv, args.timeout, cwd=ROOT)
    record = child.to_json()
    busy = max(record.get("cpu_busy_before") or 0.0, record.get("cpu_other_during") or 0.0)
    record["disturbed"] = busy > BUSY_WARNING
    if not child.ok:
        log(f"  {system}: FAILED ({child.error})")
        if child.stderr_tail:
            log("    " + child.stderr_tail.replace("\n", "\n    "))
    return record


def flashbax_python() -> str:
    """The flashbax venv's python (created if needed); raises SetupError when it cannot be."""
    return str(ensure_venv(VENVS / "flashbax", FLASHBAX_REQUIREMENTS, log=log))


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:10.2f} M"


def print_table(results: dict[str, dict[str, Any]], w: Workload) -> None:
    log(
        f"\nworkload: {w.envs} envs x capacity {w.capacity:,} steps "
        f"({w.envs * w.capacity * step_bytes() / 2**20:.0f} MiB), adds of T={w.add_length}, "
        f"samples of {w.batch} x {w.length}; transitions/s, median of {w.repeats}"
    )
    log(f"{'system':<10} {'add':>13} {'add (scan)':>13} {'sample':>13}  device / note")
    for system, record in results.items():
        result = record.get("result") or {}
        if "error" in record or not result:
            log(f"{system:<10} {'-':>13} {'-':>13} {'-':>13}  {record.get('error', 'no result')}")
            continue
        note = result.get("device", "")
        if record.get("disturbed"):
            note += "  [other CPU load: disturbed]"
        log(
            f"{system:<10} {rate(result['add_per_s']):>13} "
            f"{rate(result['add_scan_per_s']):>13} {rate(result['sample_per_s']):>13}  {note}"
        )
    heron = (results.get("heron") or {}).get("result")
    if not heron:
        return
    for peer, record in results.items():
        peer_result = record.get("result")
        if peer == "heron" or not peer_result:
            continue
        ratios = []
        for key, label in (("add_per_s", "add"), ("add_scan_per_s", "add scan")):
            if peer_result.get(key) and heron.get(key):
                ratios.append(f"{label} {heron[key] / peer_result[key]:.2f}x")
        ratios.append(f"sample {heron['sample_per_s'] / peer_result['sample_per_s']:.2f}x")
        log(f"heron / {peer}: " + ", ".join(ratios))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=100_000, help="steps per environment")
    parser.add_argument("--add-length", type=int, default=32, help="T of each add")
    parser.add_argument("--batch", type=int, default=256, help="sequences per sample")
    parser.add_argument("--length", type=int, default=32, help="steps per sequence")
    parser.add_argument("--samples", type=int, default=200, help="samples per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (median kept)")
    parser.add_argument("--systems", default="heron,flashbax,numpy")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "replay.json")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument("--wait-idle", type=float, default=0.0, help="max seconds to wait")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:  # inside a measurement process: one JSON line out
        result = WORKERS[args.worker](Workload(**json.loads(args.workload)))
        print(json.dumps(result), flush=True)
        return

    w = Workload(
        args.envs, args.capacity, args.add_length, args.batch, args.length,
        args.samples, args.repeats,
    )  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for system in [s.strip() for s in args.systems.split(",") if s.strip()]:
        if system not in WORKERS:
            raise SystemExit(f"unknown system {system!r}; valid: {', '.join(WORKERS)}")
        log(f"[{system}]")
        python = sys.executable
        if system == "flashbax":
            try:
                python = flashbax_python()
            except SetupError as exc:
                log(f"  flashbax could not be installed; compared with numpy only:\n  {exc}")
                results[system] = {"error": f"venv setup failed: {exc}"}
                continue
        results[system] = run_worker(python, system, w, args)
        if system == "flashbax" and "error" in results[system]:
            log("  flashbax did not run with this jax; compared with numpy only")
    print_table(results, w)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"workload": asdict(w), "step_bytes": step_bytes(), "results": results}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    log(f"results: {args.out}")
    print(
        json.dumps({s: (r.get("result") or {"error": r.get("error")}) for s, r in results.items()})
    )


if __name__ == "__main__":
    main()
