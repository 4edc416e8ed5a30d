"""Shared fixtures: tiny hand-made environments with known episodes, in both env kinds.

CountingEnv: the observation is the step counter t (0 at reset), every step pays reward 1,
and the episode terminates when the agent takes action 1 (discrete) — otherwise it is
truncated by the time limit. Final observations (t at the end) and first ones (0) differ, so
a test can tell which one a learner bootstraps from.
"""

from __future__ import annotations

import os


def _pin_worker_to_one_core() -> None:
    """Each pytest-xdist worker runs on one core of its own, and so does every process it
    starts (CLI runs, Ray's processes and the two-device subprocess inherit it). XLA sizes
    its thread pools (the programs' and its compiler's) by the cores a process may use when
    it makes its client, at JAX's first computation, so this runs before anything imports
    JAX. With both workers free to use both cores, each one's pools contended with the
    other's; only the threads' scheduling changes, not what is computed or compiled."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    cores = sorted(os.sched_getaffinity(0))
    if worker and len(cores) > 1:
        os.sched_setaffinity(0, {cores[int(worker.removeprefix("gw")) % len(cores)]})


_pin_worker_to_one_core()

# XLA options of the unit tests' compiles (why: below, at _with_unit_compile_options), and
# the same as XLA flags for the processes tests start. A worker inherits those flags from
# its controller, and XLA reads XLA_FLAGS once, at its first compile: taken out here, before
# anything compiles, so that this process compiles as users' runs do wherever a test asks.
UNIT_COMPILE_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_parallel_codegen_split_count": 1,
}
CHILD_XLA_FLAGS = [f"--{name}={str(value).lower()}" for name, value in UNIT_COMPILE_OPTIONS.items()]


def with_child_xla_flag(on: bool) -> None:
    """XLA_FLAGS, for the processes started from now on, with the unit tests' flags or
    without."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in CHILD_XLA_FLAGS]
    flags += CHILD_XLA_FLAGS * on
    if flags:
        os.environ["XLA_FLAGS"] = " ".join(flags)
    else:
        os.environ.pop("XLA_FLAGS", None)


with_child_xla_flag(False)

import contextlib
import functools
import shutil
import tempfile
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from jax._src import compiler as _jax_compiler  # wrapped below: the unit tests' options

from heron import envs
from heron.cli import compile_cache_dir, configure_compile_cache, program_cache_dir

_gymnax = envs.import_gymnax()  # not `import gymnax`: that loads its drawing libraries
environment, spaces = _gymnax.environments.environment, _gymnax.environments.spaces

# The persistent compilation cache of this test run: one directory the run creates, shared
# by its xdist workers and by the processes its tests start (they inherit the variable),
# removed at the end. Never the developer's own cache: a warm one would hide what a fresh
# clone pays. HERON_COMPILE_CACHE set beforehand (a directory, or off) is kept.
RUN_CACHE = "HERON_TEST_RUN_CACHE"


def pytest_configure(config):
    if not hasattr(config, "workerinput") and "HERON_COMPILE_CACHE" not in os.environ:
        path = tempfile.mkdtemp(prefix="heron-test-cache-")
        os.environ["HERON_COMPILE_CACHE"] = os.environ[RUN_CACHE] = path
    configure_compile_cache()  # as the CLI does: repeated programs compile once
    jax.jit(lambda x: x + 1)(0)  # XLA reads XLA_FLAGS now, before the children's flag is set
    _fast_compile(True)
    import compile_stats

    config.pluginmanager.register(compile_stats, "heron_compile_stats")


def program_store() -> str | None:
    """Where this test run keeps heron's exported programs (beside its compilation cache, as
    `heron train` does): a build given it loads the programs an identical configuration
    exported before instead of tracing them again."""
    return program_cache_dir(compile_cache_dir())


def build(algo: str, agent_config=None, run=None, controller=None):
    """``heron.api.build`` with this test run's program store (as `heron train` builds). A
    test that patches what the programs trace must use ``heron.api.build`` itself: a stored
    program would not see the patch."""
    from heron import api

    return api.build(algo, agent_config, run, controller, program_cache=program_store())


def resume(run_dir, steps: int | None = None, controller=None) -> dict:
    """``heron.api.resume`` with this test run's program store."""
    from heron import api

    return api.resume(str(run_dir), steps, controller, program_cache=program_store())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(address, faults directory) of a local Ray instance for the module (Ray's tests:
    tests/ray_cluster.py)."""
    import ray_cluster

    yield from ray_cluster.local_instance(tmp_path_factory)


class Trained(NamedTuple):
    run_dir: Any  # pathlib.Path
    summary: dict  # the final JSON line's fields


@pytest.fixture(scope="session")
def small_ppo_run(tmp_path_factory) -> Trained:
    """The shared small PPO run (tests/small_ppo.py) trained to its end: 16 iterations of 64
    steps, greedy evaluations after every 4th, checkpoints 8, 12 and 16 kept (and the best
    evaluation's). Read it, or change a copy (``copy_run``): other tests read it too."""
    import small_ppo

    from heron.api import train

    run_dir = tmp_path_factory.mktemp("small_ppo") / "run"
    return Trained(run_dir, train(small_ppo.build(), str(run_dir)))


def copy_run(run_dir, tmp_path) -> str:
    """A copy of ``run_dir`` in ``tmp_path`` to change."""
    copy = str(tmp_path / "copy")
    shutil.copytree(run_dir, copy)
    return copy


class Killed(Exception):
    """Stands for a process killed right after it saved a checkpoint."""


def train_until_checkpoint(monkeypatch, setup, run_dir, kill_at: int) -> None:
    """Trains ``setup`` in ``run_dir`` until checkpoint ``kill_at`` (of the latest ones, not
    the best evaluation's) is written, and stops there as a killed run would."""
    from heron.api import train
    from heron.training import checkpoints

    original = checkpoints.Checkpointer.save

    def save_then_die(self, step, state, record=None):
        original(self, step, state, record)
        if step == kill_at and self._kind == checkpoints.LATEST:
            raise Killed

    monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_die)
    with pytest.raises(Killed):
        train(setup, str(run_dir))
    monkeypatch.setattr(checkpoints.Checkpointer, "save", original)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and RUN_CACHE in os.environ:
        shutil.rmtree(os.environ.pop(RUN_CACHE), ignore_errors=True)
        del os.environ["HERON_COMPILE_CACHE"]


# Tests compile with most of XLA's optimisations off (JAX's ``jax_disable_most_optimizations``:
# LLVM at -O0, no expensive passes), which halves the time XLA takes for the small programs
# they check, the values being the same to float rounding. Exactness tests (resume, signals,
# several seeds, Ray, two devices) compare runs whose programs all compile with these same
# options (the processes a test starts inherit them), and a program gives the same bits on
# every run whatever its options. Learning tests (marked slow) compile so too: their agents,
# presets and defaults are what users get, and the options change only the rounding, as
# another CPU does, which their bounds leave a margin for (measured across seeds). The tests
# marked user_compile compile with the settings users get: the driver's exactness checked
# once as users' programs compile, comparisons whose tolerance only holds for optimised
# kernels, and the learning runs that are bound by their updates rather than by XLA
# (MuJoCo, MinAtar, SVG0), where unoptimised kernels would cost more than the compiles
# save. HERON_TEST_COMPILE=full compiles every test as users' runs are.
FAST_COMPILE = "JAX_DISABLE_MOST_OPTIMIZATIONS"
ALL_FULL = os.environ.get("HERON_TEST_COMPILE") == "full"


# Unit tests' programs are also emitted by XLA's CPU elemental emitters rather than its
# newer fusion emitters (``xla_cpu_use_fusion_emitters=false``): measured here, that halves
# again the time XLA takes for them (a small CRR iteration: 5.4 s at the setting above, 2.5 s
# with both). And their code is generated as one LLVM module
# (``xla_cpu_parallel_codegen_split_count=1``): XLA splits it to compile the parts on several
# threads, but a worker has one core, so the parts only added work (a small SAC run's XLA
# time 3.57 -> 3.15 s; the suite's 802 -> 761 s). In this process XLA takes the options per
# compile only through the compile options JAX builds, so JAX's builder is wrapped and adds
# them while most optimisations are off; the processes a test starts get them as XLA flags
# (``CHILD_XLA_FLAGS``), read once when they start. Users' settings stay untouched.


def _with_unit_compile_options(get_compile_options):
    @functools.wraps(get_compile_options)
    def get_unit_or_users_compile_options(*args, env_options_overrides=None, **kwargs):
        if jax.config.read("jax_disable_most_optimizations"):
            env_options_overrides = {**UNIT_COMPILE_OPTIONS, **(env_options_overrides or {})}
        return get_compile_options(*args, env_options_overrides=env_options_overrides, **kwargs)

    return get_unit_or_users_compile_options


_jax_compiler.get_compile_options = _with_unit_compile_options(_jax_compiler.get_compile_options)


def _fast_compile(on: bool) -> None:
    on = on and not ALL_FULL
    if on:
        os.environ[FAST_COMPILE] = "1"
    else:
        os.environ.pop(FAST_COMPILE, None)
    with_child_xla_flag(on)
    jax.config.update("jax_disable_most_optimizations", on)


def compiled_as_users(node) -> bool:
    return node.get_closest_marker("user_compile") is not None


@contextlib.contextmanager
def _compile_settings(node):
    """Inside the block, ``node`` (a test or a module) compiles as users' runs do if it is
    marked so."""
    if not compiled_as_users(node):
        yield
        return
    before = jax.config.read("jax_disable_most_optimizations")  # a module's, around a test
    _fast_compile(False)
    try:
        yield
    finally:
        _fast_compile(before)


@pytest.fixture(scope="module", autouse=True)
def _module_compile_settings(request):
    """Module fixtures (a Ray instance, a baseline run) compile as their module's tests."""
    with _compile_settings(request.node):
        yield


@pytest.fixture(autouse=True)
def _test_compile_settings(request):
    with _compile_settings(request.node):
        yield


# Modules whose module-scoped fixtures are expensive (a Ray instance and its baseline run,
# the two-device subprocess, the world-model runs), each kept on one pytest-xdist worker so
# that those fixtures run once. pytest-xdist's own xdist_group marks cannot do it under
# pytest 9: xdist 3.8 tags a test by rewriting ``item._nodeid``, which pytest 9 no longer
# reads, so every test of such a module went to whichever worker was free, and each worker
# built the fixtures again (two Ray instances on 2 cores).
ONE_WORKER_MODULES = ("test_distributed.py", "test_parallel.py", "test_world_model.py")


def pytest_collection_modifyitems(config, items):
    """The learning runs first (each a long unit of work): the many short tests after them
    even out the workers' loads at the end instead of leaving one worker on a long run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (``make test``): the modules above each as one unit of work,
    every other test on its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.rsplit("/", 1)[-1] in ONE_WORKER_MODULES else nodeid

    return ModulesOnOneWorker(config, log)


TIME_LIMIT = 3


@struct.dataclass
class CountingState(environment.EnvState):
    time: int


@struct.dataclass
class CountingParams(environment.EnvParams):
    max_steps_in_episode: int = TIME_LIMIT


class CountingJaxEnv(environment.Environment):
    @property
    def default_params(self):
        return CountingParams()

    def step_env(self, key, state, action, params):
        del key
        time = state.time + 1
        new_state = CountingState(time=time)
        terminated = jnp.asarray(action) == 1
        return self.get_obs(new_state), new_state, jnp.float32(1.0), terminated, {}

    def reset_env(self, key, params):
        del key
        state = CountingState(time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.time], jnp.float32)

    def is_terminated(self, state, params):
        return jnp.array(False)

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (1,), jnp.float32)


class CountingGymEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._time = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self._time += 1
        return np.array([self._time], np.float32), 1.0, bool(action == 1), False, {}


envs.register("Counting-v0", lambda: (CountingJaxEnv(), CountingParams()))
gymnasium.register("HeronCounting-v0", entry_point=CountingGymEnv, max_episode_steps=TIME_LIMIT)

COUNTING_IDS = ["heron:Counting-v0", "gym:HeronCounting-v0"]


@pytest.fixture(params=COUNTING_IDS)
def counting_env_id(request) -> str:
    return request.param


def rollout(env, actions: Any) -> list:
    """Steps ``env`` (reset first) through ``actions`` [T, B]; returns the T+1 TimeSteps."""
    state, timestep = env.reset(jax.random.PRNGKey(0))
    steps = [timestep]
    for t, action in enumerate(actions):
        state, timestep = env.step(state, jnp.asarray(action), jax.random.PRNGKey(t + 1))
        steps.append(jax.tree.map(np.asarray, timestep))
    return [jax.tree.map(np.asarray, s) for s in steps]
