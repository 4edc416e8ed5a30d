"""Programs exported once and loaded by later runs instead of being traced again.

    store = program_cache.open_store(directory, setup.record)   # None: not cacheable
    program = program_cache.cached(make_program(...), store)

Each function of a run's program (init, iteration, evaluate, restart) is, at its first call
with arguments of a given structure and types, exported (``jax.export``: its StableHLO, as
a function of the flattened arguments) and written to ``directory``; a later run with the
same key deserializes it and compiles it (JAX's persistent cache holds the executable)
without tracing or lowering heron's Python again; a process keeps the executables it
compiled, so that building the same programs again in it compiles nothing. The key is
everything that changes the traced programs: the run's config record (less the fields only
the host loop reads), heron's own source files, the versions of JAX and of the libraries
traced into the programs, Python, the devices and JAX's settings. Only runs whose programs
are made of that code alone are given a store (``heron.api`` decides: JAX environments of
gymnax or heron, one device, no actors, datasets, user modules or parameters of another
run).

An entry that is missing, unreadable, corrupt, of another format, or that does not fit the
arguments is ignored: the function is traced as usual and its entry written again. Entries
are written to a temporary file and renamed, so a reader never sees half of one. They are
pickled: their directory is trusted as JAX's cache, whose executables it sits among, is.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import pickle
import platform
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import jax
import numpy as np

from heron.training.program import Program

FORMAT = 1  # of an entry's file; part of the key
MAGIC = b"heron program\n"

# Fields of config.json's "run" that only the host loop reads (budget, schedules, seeds'
# values, files): the programs are the same whatever they hold (tests/test_program_cache.py
# exports both and compares them).
HOST_ONLY_RUN_FIELDS = (
    "run_dir",
    "steps",
    "seed",
    "eval_every_n",
    "save_every_n",
    "done_frac_for_policy_save",
    "keep_checkpoints",
    "checkpoints",
    "summaries",
    "wandb",
    "wandb_project",
    "video_every_n",
    "stop_at_return",
    "preset",
)

# Distributions whose code is traced into every program (or decides its numbers); the
# environment families add those their environments trace (libraries()).
BASE_LIBRARIES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "distrax",
    "rlax",
    "chex",
    "numpy",
    "ml_dtypes",
    "tfp-nightly",
    "tensorflow-probability",
    "dm-tree",
    "flatbuffers",
)

DONATED = ("iteration",)  # functions whose state (first argument) is donated, as in make_program


@functools.cache
def heron_source_digest() -> str | None:
    """sha256 over heron's package files (paths and contents); None where one changed after
    heron was imported, as then the code running may not be what the files hold."""
    import heron

    root = os.path.dirname(os.path.abspath(heron.__file__))
    digest, newest = hashlib.sha256(), 0.0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".toml")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
                    newest = max(newest, os.fstat(f.fileno()).st_mtime)
    # A second of slack for file systems whose times are coarser than the clock's.
    return digest.hexdigest() if newest < heron.IMPORTED_AT - 1.0 else None


def libraries() -> tuple[str, ...]:
    """BASE_LIBRARIES and those the registered environment families trace (gymnax)."""
    from heron import envs

    return BASE_LIBRARIES + envs.traced_libraries()


def library_versions() -> dict[str, str | None]:
    versions = {}
    for name in libraries():
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_description() -> dict:
    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [(d.platform, d.device_kind) for d in devices],
        "platform_version": devices[0].client.platform_version,
    }


def programs_record(record: dict) -> dict:
    """``record`` without the run fields the programs do not depend on."""
    run = {k: v for k, v in record.get("run", {}).items() if k not in HOST_ONLY_RUN_FIELDS}
    return {**record, "run": run}


def program_key(record: dict) -> str | None:
    """The key of the programs a setup with config record ``record`` makes in this process;
    None where the record is not plain JSON (its values would not be captured) or heron's
    files changed while it ran."""
    source = heron_source_digest()
    if source is None:
        return None
    try:
        description = json.dumps(
            {
                "format": FORMAT,
                "record": programs_record(record),
                "heron_source": source,
                "libraries": library_versions(),
                "python": [sys.version, platform.machine()],
                "devices": device_description(),
                "jax_config": {name: repr(v) for name, v in sorted(jax.config.values.items())},
            },
            sort_keys=True,
            allow_nan=True,
        )
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(description.encode()).hexdigest()


# --------------------------------------------------------------------------------- entries


class Entry(NamedTuple):
    """One function exported for one structure and type of its arguments."""

    exported: Any  # jax.export.Exported over the flattened arguments, weak types restored
    in_tree: Any  # the arguments' PyTreeDef
    out_tree: Any  # the result's PyTreeDef


class Aval(NamedTuple):
    """What a traced program depends on of an argument."""

    shape: tuple
    dtype: Any
    weak_type: bool


def aval_of(leaf) -> Aval:
    """The Aval of an array, a tracer, a ShapedArray or a ShapeDtypeStruct."""
    described = isinstance(leaf, (jax.core.ShapedArray, jax.ShapeDtypeStruct))
    aval = leaf if described else jax.typeof(leaf)
    return Aval(tuple(aval.shape), aval.dtype, bool(aval.weak_type))


def signature_of(tree, avals: tuple[Aval, ...]) -> str:
    """A stable name for arguments of structure ``tree`` and types ``avals``."""
    text = repr((str(tree), [(a.shape, str(a.dtype), a.weak_type) for a in avals]))
    return hashlib.sha256(text.encode()).hexdigest()


def encode(key: str, function: str, signature: str, exported, in_tree, out_tree) -> bytes:
    payload = pickle.dumps(
        {
            "format": FORMAT,
            "key": key,
            "function": function,
            "signature": signature,
            "in_tree": in_tree,
            "out_tree": out_tree,
            # Serialized avals lose their weak types, which decide dtype promotion where
            # the results are used next: kept here, restored on loading.
            "in_weak": [bool(a.weak_type) for a in exported.in_avals],
            "out_weak": [bool(a.weak_type) for a in exported.out_avals],
            "exported": bytes(exported.serialize()),
        },
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    return MAGIC + hashlib.sha256(payload).digest() + payload


def decode(data: bytes, key: str, function: str, signature: str) -> Entry | None:
    """The entry in ``data``, or None where it is not a whole entry of this format, key,
    function and signature."""
    header = len(MAGIC) + 32
    if not data.startswith(MAGIC) or len(data) <= header:
        return None
    payload = data[header:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : header]:
        return None
    _import_state_types()
    fields = pickle.loads(payload)
    if not isinstance(fields, dict) or (
        fields.get("format"),
        fields.get("key"),
        fields.get("function"),
        fields.get("signature"),
    ) != (FORMAT, key, function, signature):
        return None
    exported = jax.export.deserialize(bytearray(fields["exported"]))
    if len(fields["in_weak"]) != len(exported.in_avals) or len(fields["out_weak"]) != len(
        exported.out_avals
    ):
        return None
    exported = dataclasses.replace(
        exported,
        in_avals=_weakened(exported.in_avals, fields["in_weak"]),
        out_avals=_weakened(exported.out_avals, fields["out_weak"]),
    )
    return Entry(exported, fields["in_tree"], fields["out_tree"])


def _weakened(avals, weak) -> tuple:
    return tuple(a.update(weak_type=w) for a, w in zip(avals, weak, strict=True))


def _import_state_types() -> None:
    """Unpickling a PyTreeDef imports the modules of its node types: gymnax's through heron,
    which keeps its drawing libraries from loading (a plain ``import gymnax`` takes
    seconds)."""
    from heron import envs

    envs.import_gymnax()


@dataclasses.dataclass(frozen=True)
class Store:
    """Entries of the programs of one key in ``directory``."""

    directory: str
    key: str

    def path(self, function: str, signature: str) -> str:
        return os.path.join(self.directory, f"{self.key[:32]}-{function}-{signature[:16]}.jxp")

    def load(self, function: str, signature: str) -> Entry | None:
        try:
            with open(self.path(function, signature), "rb") as f:
                data = f.read()
            return decode(data, self.key, function, signature)
        except Exception:  # noqa: BLE001  (an unreadable entry is as good as none)
            return None

    def save(self, function: str, signature: str, data: bytes) -> None:
        """Writes an entry atomically; a cache that cannot be written is left as it is."""
        temporary = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".writing-")
            with os.fdopen(handle, "wb") as f:
                f.write(data)
            os.replace(temporary, self.path(function, signature))
        except OSError:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.remove(temporary)


def open_store(directory: str | None, record: dict) -> Store | None:
    """The store of the programs of a setup recorded as ``record``, or None (no directory,
    or a record the key cannot capture)."""
    if directory is None:
        return None
    key = program_key(record)
    return None if key is None else Store(directory, key)


# ------------------------------------------------------------------------------- functions


class CachedFunction:
    """A function of a program (``traced``: its jitted form) that runs its exported form,
    loaded from the store or exported at its first call with arguments of a new structure
    and type. Under a trace (``jax.eval_shape``), arguments without a stored entry go to
    ``traced``; so does every call where exporting or compiling fails."""

    def __init__(self, traced, store: Store, name: str):
        self.traced, self.store, self.name = traced, store, name
        self.donate = name in DONATED
        self.entries: dict[tuple, Entry | None] = {}  # (tree, avals) -> stored entry
        self.compiling: dict[tuple, Future] = {}  # (tree, avals) -> its stored entry compiled
        self.ready: dict[tuple, tuple | None] = {}  # (tree, avals) -> (entry, executable)
        self.jitted: dict[tuple, Any] = {}  # (tree, avals) -> the entry jitted, for tracing
        self.loaded = False  # whether a call ran a stored entry
        self.exported = False  # whether this process exported (and stored) an entry

    def __call__(self, *args):
        leaves, tree = jax.tree.flatten(args)
        avals = tuple(map(aval_of, leaves))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            entry = self.entry(tree, avals)
            if entry is None:
                return self.traced(*args)
            if (tree, avals) not in self.jitted:
                self.jitted[tree, avals] = _jitted(entry, self.donate)
            return jax.tree.unflatten(entry.out_tree, self.jitted[tree, avals](*leaves))
        if (tree, avals) not in self.ready:
            self.ready[tree, avals] = self._stored(tree, avals) or self._export(tree, avals)
        if self.ready[tree, avals] is None:
            return self.traced(*args)
        entry, executable = self.ready[tree, avals]
        return jax.tree.unflatten(entry.out_tree, executable(*leaves))

    def entry(self, tree, avals: tuple[Aval, ...]) -> Entry | None:
        """The stored entry for arguments of structure ``tree`` and types ``avals``."""
        if (tree, avals) not in self.entries:
            entry = self.store.load(self.name, signature_of(tree, avals))
            self.entries[tree, avals] = entry if entry and _fits(entry, tree, avals) else None
        return self.entries[tree, avals]

    def start_compiling(self, tree, avals: tuple[Aval, ...]) -> bool:
        """Starts compiling the stored entry for these arguments (in the background: most
        of it is reading JAX's persistent cache, which other start-up work can overlap);
        False where there is none."""
        entry = self.entry(tree, avals)
        if entry is None:
            return False
        if (tree, avals) not in self.compiling:
            compiled = self._compiled_key(signature_of(tree, avals))
            self.compiling[tree, avals] = _compiled_once(compiled, entry, self.donate, avals)
        return True

    def _compiled_key(self, signature: str) -> tuple:
        """What identifies this function's executable for ``signature`` in the process."""
        return (self.store.key, self.name, signature, self.donate)

    def _stored(self, tree, avals):
        if not self.start_compiling(tree, avals):
            return None
        executable = self.compiling[tree, avals].result()
        if executable is None:  # one that does not compile: exported again
            return None
        self.loaded = True
        return self.entries[tree, avals], executable

    def _export(self, tree, avals):
        signature = signature_of(tree, avals)
        try:
            exported, out_tree = _export(self.traced, tree, avals)
            data = encode(self.store.key, self.name, signature, exported, tree, out_tree)
            # What later runs load, loaded here too: the same module, compiled the same.
            entry = decode(data, self.store.key, self.name, signature)
        except Exception:  # noqa: BLE001  (not exportable: traced as usual)
            return None
        if entry is None or not _fits(entry, tree, avals):
            return None
        executable = _compile(entry, self.donate, avals)
        if executable is None:
            return None
        _remember(self._compiled_key(signature), _done(executable))
        self.store.save(self.name, signature, data)
        self.entries[tree, avals] = entry
        self.exported = True
        return entry, executable


def _fits(entry: Entry, tree, avals: tuple[Aval, ...]) -> bool:
    return entry.in_tree == tree and tuple(map(aval_of, entry.exported.in_avals)) == avals


def _specs(avals: tuple[Aval, ...]) -> list:
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in avals]


def _export(traced, tree, avals: tuple[Aval, ...]):
    """(``traced`` exported as a function of the flattened arguments, the PyTreeDef of its
    result)."""
    out_trees = []

    def flat(*leaves):
        result_leaves, out_tree = jax.tree.flatten(traced(*jax.tree.unflatten(tree, leaves)))
        out_trees.append(out_tree)
        return result_leaves

    exported = jax.export.export(jax.jit(flat))(*_specs(avals))
    return exported, out_trees[-1]


def _jitted(entry: Entry, donate: bool):
    """The entry jitted; with ``donate``, its first argument's leaves donated."""
    donated = tuple(range(entry.in_tree.children()[0].num_leaves)) if donate else ()
    return jax.jit(entry.exported.call, donate_argnums=donated)


def _compile(entry: Entry, donate: bool, avals: tuple[Aval, ...]):
    """The executable of ``entry`` (lowered from avals alone, so that the run that exports
    it and those that load it compile the same module), or None where it does not
    compile."""
    try:
        return _jitted(entry, donate).lower(*_specs(avals)).compile()
    except Exception:  # noqa: BLE001  (e.g. a module this JAX cannot compile)
        return None


# The executables of stored entries this process compiled, by (key, function, signature,
# donation), the most recently used last: a process that builds the same programs again (a
# resumed run, a study's trials, a notebook's second build) runs them without lowering them
# and reading JAX's persistent cache again (a third of a second for an iteration here).
COMPILED_KEPT = 32
_compiled: collections.OrderedDict[tuple, Future] = collections.OrderedDict()


def _compiled_once(compiled: tuple, entry: Entry, donate: bool, avals: tuple[Aval, ...]):
    """The executable of ``entry`` (a Future), compiled once per process for the key
    ``compiled``."""
    if compiled in _compiled:
        _compiled.move_to_end(compiled)
        return _compiled[compiled]
    return _remember(compiled, _compiler().submit(_compile, entry, donate, avals))


def _remember(compiled: tuple, executable: Future) -> Future:
    _compiled[compiled] = executable
    while len(_compiled) > COMPILED_KEPT:
        _compiled.popitem(last=False)
    return executable


def _done(executable) -> Future:
    future = Future()
    future.set_result(executable)
    return future


@functools.cache
def _compiler() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="heron-program-cache")


def cached(program: Program, store: Store | None) -> Program:
    """``program`` whose functions go through ``store`` (unchanged without one)."""
    if store is None:
        return program
    return Program(
        *(CachedFunction(f, store, name) for name, f in zip(Program._fields, program, strict=True))
    )


def start_run(program: Program, keys) -> bool:
    """Whether ``program``'s init for ``keys`` [K, 2] and the iteration of the state it
    makes both have stored entries (traced, so checked, when they were exported); starts
    compiling them, and the evaluation of the iterated state where it is stored too."""
    if not isinstance(program.init, CachedFunction):
        return False
    keys_tree, keys_avals = _arguments(keys)
    init = program.init.entry(keys_tree, keys_avals)
    if init is None:
        return False
    state_avals = tuple(map(aval_of, init.exported.out_avals))
    count_tree, count_avals = _arguments(np.int32(1))
    # iteration(state, count)
    iteration_tree = jax.tree_util.treedef_tuple([init.out_tree, count_tree.children()[0]])
    iteration_avals = state_avals + count_avals
    iteration = program.iteration.entry(iteration_tree, iteration_avals)
    if iteration is None:
        return False
    program.init.start_compiling(keys_tree, keys_avals)
    program.iteration.start_compiling(iteration_tree, iteration_avals)
    # evaluate(state, keys [K, 2]): the state as iteration returns it, first of its results.
    state_tree = iteration.out_tree.children()[0]
    iterated = tuple(map(aval_of, iteration.exported.out_avals))[: state_tree.num_leaves]
    evaluate_tree = jax.tree_util.treedef_tuple([state_tree, keys_tree.children()[0]])
    program.evaluate.start_compiling(evaluate_tree, iterated + keys_avals)
    return True


def _arguments(*args) -> tuple:
    """(PyTreeDef, avals) of the arguments ``args``."""
    leaves, tree = jax.tree.flatten(args)
    return tree, tuple(map(aval_of, leaves))


def loaded(program: Program) -> set[str]:
    """The names of ``program``'s functions that ran from stored entries."""
    return {name for name, f in program._asdict().items() if getattr(f, "loaded", False)}


def exported(program: Program) -> set[str]:
    """The names of ``program``'s functions exported (and stored) by this process."""
    return {name for name, f in program._asdict().items() if getattr(f, "exported", False)}
