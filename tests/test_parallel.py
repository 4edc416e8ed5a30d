"""The data-parallel learner: every agent's ``learn`` split over two devices equals the
one-device ``learn`` on the same replay state (two CPU devices forced in a subprocess,
since XLA reads its flags once per process)."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from contract_cases import CASES, TWO_DEVICE_TRAINING

from heron import parallel
from heron.api import build, train
from heron.training import RunConfig

TOLERANCE = 1e-6  # float32 sums in a different order


@pytest.fixture(scope="module")
def two_device_results(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("two_devices") / "run"
    script = os.path.join(os.path.dirname(__file__), "two_devices.py")
    completed = subprocess.run(
        [sys.executable, script, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=2400,  # five agents compiled twice each, on a loaded CI machine
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("algo", sorted(CASES))
def test_two_device_learn_equals_one_device_learn(two_device_results, algo):
    assert two_device_results["devices"] == 2
    differences = two_device_results[algo]
    assert differences["changed"] > 100 * TOLERANCE  # the learning did move the parameters
    assert differences["params"] < TOLERANCE
    assert differences["state"] < 10 * TOLERANCE  # optimiser moments and target networks too
    assert differences["metrics"] < 1e-4  # means of larger numbers


def test_two_device_training_matches_one_device(two_device_results, tmp_path):
    case = CASES["crr"]
    run = RunConfig(env=case.jax_env, **TWO_DEVICE_TRAINING)
    one_device = train(build("crr", case.config, run), str(tmp_path / "run"))
    two_devices = two_device_results["train"]
    assert two_devices["steps"] == one_device["steps"] == TWO_DEVICE_TRAINING["steps"]
    for one, two in zip(one_device["per_seed"], two_devices["per_seed"], strict=True):
        assert two["final_eval_return"] == pytest.approx(one["final_eval_return"], rel=1e-4)


def test_helpers_on_one_device_are_the_plain_operations():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    mask = jnp.array([1.0, 0.0, 1.0, 1.0])
    assert parallel.device_mean({"x": x})["x"] is x
    assert float(parallel.masked_mean(x, mask)) == pytest.approx(8.0 / 3.0)
    assert float(parallel.masked_mean(x, jnp.zeros(4))) == 0.0
    keys = parallel.example_keys(jax.random.key(0), 3)
    expected = [jax.random.fold_in(jax.random.key(0), i) for i in range(3)]
    for key, want in zip(keys, expected, strict=True):
        assert (jax.random.key_data(key) == jax.random.key_data(want)).all()
