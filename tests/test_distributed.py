"""Actors on Ray (heron.distributed), against this module's local Ray instance (see
tests/ray_cluster.py): the synchronous baseline run every exactness test compares with (a
repeat with an actor SIGKILLed, the driver stopped by SIGTERM and SIGKILL and resumed, a
two-device learner), servers on loopback only, one actor against the in-process run, policy
lag, the asynchronous driver with an actor SIGKILLed, an environment that always raises
(resumed, it raises once), bad input, and learning with two actors. The module runs on one
xdist worker (one Ray instance on 2 cores)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import ray_envs
from ray_cluster import (
    GYM_ENV,
    JAX_ENV,
    MARKS,
    PPO,
    TESTS,
    lines,
    params,
    small_run,
    small_run_argv,
    train,
)

from heron import api, cli, presets
from heron.run_config import DistConfig, RunConfig
from heron.training import checkpoints

pytestmark = MARKS

TOLERANCE = 1e-4  # tests/test_parallel.py's for a trained run on two devices


@pytest.fixture(scope="module")
def baseline_setup(cluster):
    """The built synchronous 2-actor run: trained again, it runs the programs compiled for
    the baseline (programs with host callbacks, as every Ray run's iteration is, never
    enter JAX's persistent cache)."""
    return api.build("ppo", PPO, small_run(cluster[0]))


@pytest.fixture(scope="module")
def baseline(baseline_setup, tmp_path_factory):
    """The synchronous 2-actor run every exactness test compares with."""
    run_dir = tmp_path_factory.mktemp("baseline") / "run"
    return api.train(baseline_setup, str(run_dir)), run_dir


def _listening_addresses(pids) -> set[str]:
    addresses = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        addresses |= {c.laddr.ip for c in connections if c.status == psutil.CONN_LISTEN}
    return addresses


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def test_the_ray_instance_listens_on_loopback_only(cluster, baseline):
    """Every server of the module's Ray instance (GCS, raylet, workers and the actors of the
    baseline run, this process's driver) listens on 127.0.0.1, none on another address."""
    this = psutil.Process()
    pids = [this.pid, *(child.pid for child in this.children(recursive=True))]
    addresses = _listening_addresses(pids)
    assert addresses and addresses <= LOOPBACK, addresses


_LOCAL_INSTANCE = """
import json
import psutil
import ray  # imported before heron connects, as in a notebook
from heron.distributed import cluster
assert cluster.connect(None, 1)
ray.get(ray.remote(lambda: 0).remote())  # a worker started
this = psutil.Process()
listening = set()
for process in [this, *this.children(recursive=True)]:
    try:
        connections = process.net_connections(kind="inet")
    except psutil.NoSuchProcess:
        continue
    listening |= {c.laddr.ip for c in connections if c.status == psutil.CONN_LISTEN}
print(json.dumps(sorted(listening)))
cluster.disconnect()
"""


def test_the_local_instance_heron_starts_listens_on_loopback_only(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    completed = subprocess.run(
        [sys.executable, "-c", _LOCAL_INSTANCE],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    addresses = set(json.loads(completed.stdout.strip().splitlines()[-1]))
    assert addresses and addresses <= LOOPBACK, addresses


def test_a_synchronous_run_repeats_exactly_even_when_an_actor_is_killed(
    cluster, baseline_setup, baseline, tmp_path, capfd
):
    """The baseline takes one unroll of each actor per iteration, made with the newest
    parameters; a second run of it (the same setup trained again) whose actors are
    SIGKILLed three times at different points (whichever actor process asks for its
    second unroll once the fault is armed again; each restarted from its last snapshot)
    ends with the very same parameters, and Ray's reports of the deaths stay off stdout."""
    summary, run_dir = baseline
    assert summary["dist"]["actors"] == 2 and summary["dist"]["actor_restarts"] == 0
    assert len(summary["dist"]["actor_steps_per_s"]) == 2
    assert all(speed > 0 for speed in summary["dist"]["actor_steps_per_s"])
    records = lines(run_dir)
    assert [line["iteration"] for line in records] == list(range(1, 17))
    for line in records:
        assert line["dist/actor0_unrolls_taken"] == line["dist/actor1_unrolls_taken"]
        assert line["dist/actor0_unrolls_taken"] == line["iteration"]
        assert line["dist/policy_lag_max"] == 0.0

    capfd.readouterr()
    kills, fired, done = 3, [], threading.Event()

    def arm_again():  # each time the armed kill fired, arm the next
        path = os.path.join(cluster[1], ray_envs.KILL)
        ray_envs.arm(cluster[1], ray_envs.KILL)
        while not done.is_set() and len(fired) < kills:
            if not os.path.exists(path):
                fired.append(time.monotonic())
                if len(fired) < kills:
                    ray_envs.arm(cluster[1], ray_envs.KILL)
            time.sleep(0.02)

    arming = threading.Thread(target=arm_again, daemon=True)
    arming.start()
    try:
        again = api.train(baseline_setup, str(tmp_path / "run"))
    finally:
        done.set()
        arming.join()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(cluster[1], ray_envs.KILL))
    assert len(fired) == kills
    assert again["dist"]["actor_restarts"] == kills
    assert again["dist"]["unrolls_lost"] == 0
    assert again["params_digest"] == summary["params_digest"]
    time.sleep(1.0)  # Ray's error messages arrive on a thread of their own
    assert capfd.readouterr().out == ""  # stdout is heron's JSON line's alone


_DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from contract_cases import CASES
from heron import api
from heron.cli import configure_compile_cache
from heron.run_config import RunConfig
configure_compile_cache()
run = RunConfig(**{run!r})
print(api.train(api.build("ppo", CASES["ppo"].config, run), {run_dir!r})["params_digest"])
"""


def _driver(run: RunConfig, run_dir, env=None, **popen):
    settings = {  # the sub-configs (dist, atari) stay at their defaults
        f.name: getattr(run, f.name)
        for f in dataclasses.fields(run)
        if not dataclasses.is_dataclass(getattr(run, f.name))
    }
    script = _DRIVER.format(tests=TESTS, run=settings, run_dir=str(run_dir))
    return subprocess.Popen([sys.executable, "-c", script], text=True, env=env, **popen)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has ended
        return f.read().split(")")[-1].split()[0] != "Z"


def _cli_process(argv, log):
    """``heron`` in a subprocess whose stderr goes to ``log`` (tests/ on its path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "heron.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )


def _wait_for_checkpoint_after(run_dir, step, process) -> int:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        saved = checkpoints.latest_step(str(run_dir))
        if saved is not None and saved > step:
            return saved
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint after {step} in {run_dir} (exit {process.poll()})")


def _actor_pids(log) -> list[int]:
    listed = next(line for line in open(log) if "actors on Ray" in line)
    return [int(part.split()[0]) for part in listed.split("pid ")[1:]]


def _ended(pids, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    return not any(_alive(pid) for pid in pids)


def test_sigterm_then_sigkill_of_the_driver_then_resume_equals_the_uninterrupted_run(
    cluster, baseline, tmp_path
):
    """The baseline's run from the command line: SIGTERM saves and stops it cleanly; its
    resumption is SIGKILLed; resuming again ends exactly where the uninterrupted run did."""
    run_dir = tmp_path / "run"
    argv = small_run_argv(cluster[0], run_dir, JAX_ENV, 512)
    argv += ["--eval-every-n", "16", "--save-every-n", "2"]
    first = _cli_process(argv, tmp_path / "first.log")
    _wait_for_checkpoint_after(run_dir, 0, first)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 128 + signal.SIGTERM
    assert "heron: stopped: SIGTERM" in open(tmp_path / "first.log").read()
    stopped_at = checkpoints.latest_step(str(run_dir))
    assert _ended(_actor_pids(tmp_path / "first.log"), within_s=30)

    second = _cli_process(["train", "--resume", str(run_dir)], tmp_path / "second.log")
    killed_at = _wait_for_checkpoint_after(run_dir, stopped_at, second)
    os.kill(second.pid, signal.SIGKILL)
    second.wait()
    assert killed_at < 16
    assert _ended(_actor_pids(tmp_path / "second.log"), within_s=60)  # Ray ends them
    resumed = api.resume(str(run_dir))
    assert resumed["params_digest"] == baseline[0]["params_digest"]


def test_a_two_device_learner_with_two_actors_equals_the_one_device_learner(
    cluster, baseline, tmp_path
):
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}  # and the tests' own, for the same kernels
    driver = _driver(small_run(cluster[0]), tmp_path / "run", env=env, stderr=subprocess.PIPE)
    _, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err[-3000:]
    ours, theirs = params(tmp_path / "run"), params(baseline[1])
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs, strict=True))
    assert 0 < difference < TOLERANCE  # another summation order, the same learning


# ------------------------------------------------------------------- other drivers, faults


def test_one_actor_equals_the_in_process_run(cluster, tmp_path):
    run = small_run(cluster[0], actors=1, steps=256)
    on_ray = train(run, tmp_path / "ray")
    in_process = train(dataclasses.replace(run, actors=0, ray_address=None), tmp_path / "local")
    assert on_ray["dist"]["actors"] == 1 and "dist" not in in_process
    ours, theirs = params(tmp_path / "ray"), params(tmp_path / "local")
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs, strict=True)) < 1e-5
    assert on_ray["final_eval_return"] == pytest.approx(in_process["final_eval_return"])


def test_policy_lag_one_acts_one_version_behind(cluster, tmp_path):
    run = small_run(cluster[0], steps=256, dist={"policy_lag": 1})
    summary = train(run, tmp_path / "a")
    records = lines(tmp_path / "a")
    assert [line["dist/policy_lag_max"] for line in records] == [0.0] + [1.0] * 7
    assert summary["dist"]["policy_lag_max"] == 1.0


def test_sigkill_of_an_actor_in_an_asynchronous_run(cluster, tmp_path):
    ray_envs.arm(cluster[1], ray_envs.KILL)
    run = small_run(cluster[0], steps=512, dist={"driver": "async", "learn_queue_cap": 2})
    summary = train(run, tmp_path / "run")
    assert not os.path.exists(os.path.join(cluster[1], ray_envs.KILL))
    assert summary["dist"]["actor_restarts"] == 1 and summary["dist"]["unrolls_lost"] == 0
    records = lines(tmp_path / "run")
    assert [line["iteration"] for line in records] == list(range(1, 17))
    updates = {line["train/updates"] for line in records}
    assert len(updates) == 1 and updates.pop() > 0  # every iteration learnt, the same amount
    for line in records:
        taken = [line[f"dist/actor{a}_unrolls_taken"] for a in range(2)]
        # Each actor's unrolls were taken in order, none twice and none skipped.
        assert taken == [line[f"dist/actor{a}_next_unroll"] for a in range(2)]
        assert sum(taken) == 2 * line["iteration"]


def test_an_asynchronous_off_policy_run_keeps_its_replay_ratio_and_drops_old_unrolls(
    cluster, tmp_path
):
    """Asynchronous CRR: every iteration makes crr.replay.ratio updates per environment step
    it took (passes over the consume-once unrolls), as the in-process run does; unrolls made
    more than max_policy_lag versions ago are dropped and counted, and none is lost."""
    from contract_cases import CASES

    config = dataclasses.replace(CASES["crr"].config, batch_size=4)  # ratio 0.5, unroll 2
    dist = {"driver": "async", "learn_queue_cap": 2, "max_policy_lag": 1}
    run = small_run(cluster[0], steps=128, dist=dist)  # 2 unrolls x 2 envs x 2 steps a time
    summary = api.train(api.build("crr", config, run), str(tmp_path / "run"))
    records = lines(tmp_path / "run")
    steps_per_iteration = 2 * 2 * config.unroll_length
    assert [line["iteration"] for line in records] == list(range(1, 17))
    assert {line["train/updates"] for line in records} == {
        config.replay.ratio * steps_per_iteration
    }
    assert summary["dist"]["unrolls_lost"] == 0
    assert summary["dist"]["unrolls_dropped"] == records[-1]["dist/unrolls_dropped"]
    for line in records:  # dropped unrolls are taken (in order) but never trained on
        taken = [line[f"dist/actor{a}_unrolls_taken"] for a in range(2)]
        assert sum(taken) == 2 * line["iteration"]
        assert sum(line[f"dist/actor{a}_next_unroll"] for a in range(2)) == (
            sum(taken) + line["dist/unrolls_dropped"]
        )


def test_an_environment_that_always_raises_stops_the_run_in_one_line_and_once_is_recovered(
    cluster, tmp_path, capfd
):
    """A Gymnasium environment that raises in every incarnation of its actor stops the run
    in one line once ``dist.max_actor_restarts`` is spent, its last checkpoint kept; resumed
    with the environment raising once more, the actor is restarted and the run ends."""
    ray_envs.arm(cluster[1], ray_envs.RAISE_ALWAYS)
    run_dir = tmp_path / "run"
    argv = small_run_argv(cluster[0], run_dir, GYM_ENV, 256)
    argv += ["--save-every-n", "1", "--dist.max-actor-restarts", "1"]
    try:
        status = cli.main(argv)
    finally:
        os.unlink(os.path.join(cluster[1], ray_envs.RAISE_ALWAYS))
    errors = [line for line in capfd.readouterr().err.splitlines() if "heron: error" in line]
    assert status == 1 and len(errors) == 1
    assert "actor" in errors[0] and GYM_ENV in errors[0]
    assert "RuntimeError: environment broke at step" in errors[0]
    assert "dist.max_actor_restarts=1" in errors[0]
    saved = checkpoints.latest_step(str(run_dir))
    assert saved is not None and saved <= 4  # the resumption's actors step past FAULT_AFTER
    restarts = next(line for line in lines(run_dir) if line["iteration"] == saved)
    ray_envs.arm(cluster[1], ray_envs.RAISE_ONCE)
    resumed = api.resume(str(run_dir))
    assert not os.path.exists(os.path.join(cluster[1], ray_envs.RAISE_ONCE))  # it fired
    assert resumed["steps"] == 256
    assert resumed["dist"]["actor_restarts"] == restarts["dist/actor_restarts"] + 1
    err = capfd.readouterr().err
    assert "RuntimeError: environment broke at step" in err
    assert "Gymnasium environments start fresh episodes" in err


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_envs": 6, "actors": 4}, "num_envs=6 must be a multiple of actors=4"),
        ({"actors": 2, "seeds": 2}, "seeds=2"),
        ({"actors": 2, "dataset": "data"}, "drop --actors or --dataset"),
        (
            {"actors": 2, "dist": DistConfig(driver="async", learn_queue_cap=3)},
            "dist.learn_queue_cap=3 must be <= actors=2",
        ),
        (
            {"actors": 2, "replay": "uniform", "dist": DistConfig(driver="async")},
            "replay='uniform' cannot serve it",
        ),
        ({"dist": DistConfig(driver="async")}, "add --actors"),
        ({"actors": 2, "dist": DistConfig(learn_queue_cap=2)}, "add --dist.driver async"),
    ],
)
def test_bad_run_options_are_refused_in_one_line(overrides, message):
    with pytest.raises(api.ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        RunConfig(**overrides)


def _cli_refuses(argv, tmp_path, capsys, status=2) -> str:
    run_dir = tmp_path / "never"
    assert cli.main([*argv, "--run-dir", str(run_dir)]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("heron: error: ")
    assert not run_dir.exists()  # nothing written
    return err[0]


def test_an_unreachable_ray_address_is_refused(tmp_path, capsys):
    line = _cli_refuses(
        ["train", "ppo", "--actors", "1", "--ray-address", "127.0.0.1:9"], tmp_path, capsys
    )
    assert "cannot reach the Ray cluster at '127.0.0.1:9'" in line


def test_an_address_that_answers_but_not_as_ray_is_refused_at_once(tmp_path, capsys):
    """An HTTP server where a Ray head should be: refused in one line within seconds (Ray
    itself retries for about 30 s, logging a warning a second)."""
    import http.server

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        start = time.monotonic()
        argv = ["train", "ppo", "--actors", "1", "--ray-address", address]
        line = _cli_refuses(argv, tmp_path, capsys)
    finally:
        server.shutdown()
    assert f"{address!r} answers, but not as a Ray head" in line
    assert time.monotonic() - start < 15


def test_missing_ray_names_the_extra_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    line = _cli_refuses(["train", "ppo", "--actors", "1"], tmp_path, capsys)
    assert "pip install 'heron[ray]'" in line


def test_a_gpu_learner_on_a_cluster_without_gpus_is_refused(cluster, tmp_path, capsys):
    argv = ["train", "ppo", "--actors", "1", "--ray-address", cluster[0]]
    line = _cli_refuses([*argv, "--dist.learner-gpus", "1"], tmp_path, capsys)
    assert "dist.learner_gpus=1 needs 1 GPUs; the Ray cluster has 0" in line


def test_plain_runs_never_import_ray_nor_gymnaxs_drawing_libraries():
    """Nor do gymnax environments, heron's or a user's env module's, load the drawing
    libraries gymnax imports for its renderers (seaborn with scipy.stats, pyplot): 1.5 s of
    every process, Ray's actors included."""
    script = (
        "import sys; from heron import api, envs; from heron.run_config import RunConfig; "
        "envs.import_env_module('custom_envs'); "  # a user's module: `from gymnax... import`
        "api.build('ppo', run=RunConfig()); "
        "api.build('ppo', run=RunConfig(env='heron:CartPole-masked-v1')); "
        "print([m in sys.modules for m in ('ray', 'scipy.stats', 'matplotlib.figure')])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=TESTS)
    assert out.stdout.strip() == "[False, False, False]", out.stderr[-2000:]


# ---------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_crr_learns_pendulum_with_two_actors(cluster, tmp_path):
    """The Pendulum preset a user gets (`heron train crr --env gymnax:Pendulum-v1 --actors
    2`), its experience from 2 actors: greedy >= -200 within the preset's 20k steps, the
    claim of tests/test_learning.py's in-process run (seeds 0-2 on Ray reached it at 6k, 8k
    and 4k steps)."""
    config, run = presets.preset("crr", "gymnax:Pendulum-v1")
    run = dataclasses.replace(run, seed=0, actors=2, ray_address=cluster[0], stop_at_return=-200.0)
    summary = api.train(api.build("crr", config, run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= -200, lines(tmp_path / "run", "eval")


@pytest.mark.slow
def test_ppo_solves_gymnasium_cartpole_with_two_actors(cluster, tmp_path):
    """tests/test_learning.py's PPO threshold on Gymnasium CartPole, with 2 actors."""
    from heron.agents import PPOConfig

    run = RunConfig(
        env="gym:CartPole-v1", steps=150_000, seed=0, actors=2, ray_address=cluster[0],
        stop_at_return=475.0,
    )  # fmt: skip
    summary = api.train(api.build("ppo", PPOConfig(), run), str(tmp_path / "run"))
    assert summary["best_eval_return"] >= 475
