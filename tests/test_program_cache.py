"""The program cache (heron/training/program_cache.py): a run whose programs were exported
before loads them instead of tracing them, with the same numbers; a run whose programs
differ, or that the key cannot capture, does not; a damaged entry is ignored and written
again. Every test keeps its programs in its own temporary directory."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import pickle
import shutil

import jax
import numpy as np
import pytest

from heron import cli
from heron.agents import NetworkConfig, PPOConfig
from heron.api import build, resume, train
from heron.training import RunConfig, checkpoints, driver, program, program_cache
from heron.training.driver import seed_keys

TINY_PPO = PPOConfig(
    unroll_length=8, batch_size=8, num_epochs=1, network=NetworkConfig(hidden_sizes=(8,))
)
FUNCTIONS = {"init", "iteration", "evaluate"}


def tiny_run(**overrides) -> RunConfig:
    settings = dict(
        steps=96,  # 3 iterations of 4 envs x 8 steps
        num_envs=4,
        eval_every_n=1,
        n_evals=2,
        eval_temperatures=(1.0, 0.0),
        checkpoints=False,  # but where a test resumes
    )
    return RunConfig(**{**settings, **overrides})


def lines(run_dir) -> list[dict]:
    """metrics.jsonl without wall-clock times."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in f]


@pytest.fixture
def traces(monkeypatch):
    """Counts the traces of an iteration (each calls learn_phase once)."""
    count = {"iteration": 0}
    learn_phase = program.learn_phase

    def counted(*args, **kwargs):
        count["iteration"] += 1
        return learn_phase(*args, **kwargs)

    monkeypatch.setattr(program, "learn_phase", counted)
    return count


@dataclasses.dataclass
class Exported:
    programs: str  # the program cache, as the first run left it
    run_dir: str
    summary: dict


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    """A first run with an empty program cache: it exports its programs."""
    root = tmp_path_factory.mktemp("program_cache")
    programs, run_dir = str(root / "programs"), str(root / "first")
    setup = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
    summary = train(setup, run_dir)
    assert program_cache.exported(setup.compiled) == FUNCTIONS
    assert not program_cache.loaded(setup.compiled)
    return Exported(programs, run_dir, summary)


def copied(exported: Exported, tmp_path) -> str:
    programs = str(tmp_path / "programs")
    shutil.copytree(exported.programs, programs)
    return programs


def test_a_second_run_loads_its_programs_with_the_same_numbers(exported, tmp_path, traces):
    programs = copied(exported, tmp_path)
    setup = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
    summary = train(setup, str(tmp_path / "second"))
    assert program_cache.loaded(setup.compiled) == FUNCTIONS
    assert not program_cache.exported(setup.compiled)
    assert traces["iteration"] == 0  # neither validated nor traced to run

    uncached = train(build("ppo", TINY_PPO, tiny_run()), str(tmp_path / "uncached"))
    # Once: the build's check is the trace the run compiles, and the shapes of the
    # iteration's metrics come from the same trace as the loop that carries them.
    assert traces["iteration"] == 1
    for run in (summary, exported.summary):
        assert run["params_digest"] == uncached["params_digest"]
        assert run["final_eval_return"] == uncached["final_eval_return"]
    assert lines(tmp_path / "second") == lines(tmp_path / "uncached")
    assert lines(exported.run_dir) == lines(tmp_path / "uncached")


@pytest.fixture
def stored_compiles():
    """Counts the compilations of stored programs (JAX names them after the exported
    function, ``call``): each is XLA's, or a read of JAX's persistent cache."""
    count = {"call": 0}

    def listener(event, seconds, fun_name="", **_):
        if event == "/jax/core/compile/backend_compile_duration" and fun_name == "jit(call)":
            count["call"] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield count
    jax.monitoring.unregister_event_duration_listener(listener)


def test_a_process_compiles_each_stored_program_once(exported, tmp_path, stored_compiles):
    """Building the same programs again in one process (a resumed run, a study's trials, a
    notebook's second run) runs the executables it compiled before: nothing is lowered or
    read from JAX's persistent cache again."""
    programs = copied(exported, tmp_path)
    program_cache._compiled.clear()  # as in a new process
    for run_dir in ("first", "second"):  # the first reads each from JAX's cache, once
        setup = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
        summary = train(setup, str(tmp_path / run_dir))
        assert program_cache.loaded(setup.compiled) == FUNCTIONS
        assert stored_compiles["call"] == len(FUNCTIONS)
    assert summary["params_digest"] == exported.summary["params_digest"]


@pytest.mark.parametrize(
    "ppo, run",
    [
        (dataclasses.replace(TINY_PPO, learning_rate=1e-3), tiny_run()),
        (dataclasses.replace(TINY_PPO, network=NetworkConfig(hidden_sizes=(16,))), tiny_run()),
        (TINY_PPO, tiny_run(n_evals=3)),
    ],
    ids=["learning_rate", "network", "n_evals"],
)
def test_a_changed_program_misses(exported, tmp_path, traces, ppo, run):
    setup = build("ppo", ppo, run, program_cache=copied(exported, tmp_path))
    assert traces["iteration"] > 0  # validated, as without a cache
    assert not program_cache.start_run(setup.program(), seed_keys(setup.seeds))


def test_fields_only_the_host_reads_share_the_programs(tmp_path):
    """Budget, schedules, the seed's value and files do not change what is traced: the
    exported modules are the same, and so is the key."""
    changed = tiny_run(
        steps=64,
        seed=7,
        eval_every_n=2,
        save_every_n=3,
        done_frac_for_policy_save=0.0,
        keep_checkpoints=1,
        checkpoints=True,
        summaries=False,
        wandb=True,
        wandb_project="mine",
        video_every_n=2,
        stop_at_return=400.0,
        preset="ppo/gymnax:CartPole-v1",
        run_dir=str(tmp_path / "elsewhere"),
    )
    assert set(program_cache.HOST_ONLY_RUN_FIELDS) == {
        f for f in dataclasses.asdict(tiny_run()) if getattr(changed, f) != getattr(tiny_run(), f)
    }
    modules, keys = [], []
    for run in (tiny_run(), changed):
        setup = build("ppo", TINY_PPO, run)
        seeds = seed_keys(setup.seeds)
        state = jax.eval_shape(setup.program().init, seeds)
        calls = [
            (setup.program().init, (seeds,)),
            (setup.program().iteration, (state, np.int32(1))),
            (setup.program().evaluate, (state, seeds)),
        ]
        modules.append(
            [
                program_cache._export(f, *program_cache._arguments(*args))[0].mlir_module()
                for f, args in calls
            ]
        )
        keys.append(program_cache.program_key(setup.record))
    assert keys[0] == keys[1]
    assert modules[0] == modules[1]


def _stored(programs: str) -> dict[str, str]:
    return {path.split("-")[-2]: path for path in glob.glob(os.path.join(programs, "*.jxp"))}


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flipped(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


def _other_format(data: bytes) -> bytes:
    """A whole entry, checksum and all, written by another format of the cache."""
    header = len(program_cache.MAGIC) + 32
    fields = pickle.loads(data[header:])
    payload = pickle.dumps({**fields, "format": program_cache.FORMAT + 1})
    return program_cache.MAGIC + hashlib.sha256(payload).digest() + payload


@pytest.mark.parametrize("damage", [_truncated, _flipped, _other_format])
def test_a_damaged_entry_is_ignored_and_written_again(exported, tmp_path, traces, damage):
    programs = copied(exported, tmp_path)
    path = _stored(programs)["iteration"]
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damage(data))
    setup = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
    assert traces["iteration"] > 0  # validated, as without a cache
    summary = train(setup, str(tmp_path / "run"))
    assert program_cache.loaded(setup.compiled) == {"init", "evaluate"}
    assert program_cache.exported(setup.compiled) == {"iteration"}
    assert summary["params_digest"] == exported.summary["params_digest"]
    assert not glob.glob(os.path.join(programs, ".writing-*"))
    traced = traces["iteration"]
    again = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
    assert traces["iteration"] == traced  # the entry written again loads
    assert program_cache.start_run(again.program(), seed_keys(again.seeds))


def test_an_unwritable_cache_leaves_the_run_as_it_was(exported, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    setup = build("ppo", TINY_PPO, tiny_run(), program_cache=str(blocker / "programs"))
    summary = train(setup, str(tmp_path / "run"))
    assert summary["params_digest"] == exported.summary["params_digest"]


@pytest.mark.parametrize(
    "run",
    [
        tiny_run(env="custom_envs:CounterJaxEnv"),
        tiny_run(env="heron:Counter-v0", env_module="custom_env_registry"),
    ],
    ids=["user_env", "env_module"],
)
def test_environments_of_a_users_module_are_not_cached(tmp_path, run):
    setup = build("ppo", TINY_PPO, run, program_cache=str(tmp_path / "programs"))
    assert setup.programs is None
    assert not isinstance(setup.program().init, program_cache.CachedFunction)


def test_a_users_factory_under_a_heron_id_is_not_cached(tmp_path, monkeypatch):
    from heron import envs
    from heron.envs.families import heron as family

    monkeypatch.setitem(family._HERON_ENVS, "CartPole-masked-v1", family._masked_cartpole)
    assert envs.is_builtin("heron:CartPole-masked-v1")
    monkeypatch.setitem(family._HERON_ENVS, "CartPole-masked-v1", lambda: family._masked_cartpole())
    assert not envs.is_builtin("heron:CartPole-masked-v1")
    assert envs.is_builtin("gymnax:CartPole-v1")
    assert not envs.is_builtin("custom_envs:CounterJaxEnv")


def test_a_resumed_run_loads_its_programs_and_matches_the_uninterrupted_one(
    exported, tmp_path, monkeypatch
):
    """The first resume exports its restart (and whatever differs for restored states: they
    are not weakly typed as init's are), the next loads them."""
    programs = copied(exported, tmp_path)
    saved = tiny_run(checkpoints=True, save_every_n=1, done_frac_for_policy_save=0.0)
    save = checkpoints.Checkpointer.save

    class Killed(Exception):
        pass

    def save_then_die(self, step, state, record=None):
        save(self, step, state, record)
        if step == 2:  # once checkpoint 1 is complete
            raise Killed

    monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_die)
    with pytest.raises(Killed):
        train(build("ppo", TINY_PPO, saved, program_cache=programs), str(tmp_path / "a"))
    monkeypatch.setattr(checkpoints.Checkpointer, "save", save)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    setups = []
    continue_run = driver.continue_run
    monkeypatch.setattr(
        driver,
        "continue_run",
        lambda setup, *a, **k: setups.append(setup) or continue_run(setup, *a, **k),
    )
    summaries = [resume(str(tmp_path / name), program_cache=programs) for name in ("a", "b")]
    assert "restart" in program_cache.exported(setups[0].compiled)
    assert not program_cache.exported(setups[1].compiled)
    assert {"restart", "iteration", "evaluate"} <= program_cache.loaded(setups[1].compiled)
    for summary in summaries:
        assert summary["params_digest"] == exported.summary["params_digest"]
    assert lines(tmp_path / "a") == lines(tmp_path / "b") == lines(exported.run_dir)


def test_donation_is_kept(exported, tmp_path):
    """The iteration's state is donated (updated in place), as without the cache."""
    deleted = []
    for programs in (None, copied(exported, tmp_path)):
        setup = build("ppo", TINY_PPO, tiny_run(), program_cache=programs)
        compiled = setup.program()
        state = compiled.init(seed_keys(setup.seeds))
        leaves = jax.tree.leaves(state)
        compiled.iteration(state, np.int32(1))
        deleted.append([leaf.is_deleted() for leaf in leaves])
    assert deleted[0] == deleted[1] and any(deleted[1])


def test_the_command_line_keeps_programs_in_its_compile_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HERON_COMPILE_CACHE", str(tmp_path / "jax"))
    assert cli.program_cache_dir(cli.compile_cache_dir()) == str(tmp_path / "jax/heron-programs")
    monkeypatch.setenv("HERON_COMPILE_CACHE", "off")
    assert cli.program_cache_dir(cli.compile_cache_dir()) is None


@pytest.mark.parametrize(
    "run",
    [tiny_run(init_from="runs/another"), tiny_run(env="gym:CartPole-v1")],
    ids=["init_from", "gymnasium"],
)
def test_parameters_of_another_run_and_host_environments_are_not_cached(run):
    from heron import api, envs

    assert api._cacheable(tiny_run(), envs.make("gymnax:CartPole-v1"))
    assert not api._cacheable(run, envs.make(run.env))


def test_heron_files_changed_while_it_runs_and_records_json_cannot_hold_are_not_cached(
    monkeypatch,
):
    import heron

    record = {"algo": "ppo", "run": {"steps": 1}}
    assert program_cache.program_key(record) is not None
    assert program_cache.program_key({**record, "ppo": {"schedule": object()}}) is None
    program_cache.heron_source_digest.cache_clear()
    monkeypatch.setattr(heron, "IMPORTED_AT", 0.0)  # as if every file changed since
    try:
        assert program_cache.program_key(record) is None
    finally:
        program_cache.heron_source_digest.cache_clear()
