import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import small_ppo
from small_ppo import PPO as SMALL_PPO
from small_ppo import build

from heron.agents import ConfigError, PPOConfig
from heron.api import train
from heron.training import RunConfig, TrainingError, checkpoints
from heron.training.driver import seed_keys


def small_run(**overrides):
    return small_ppo.run(**{"eval_every_n": 8, "save_every_n": 16, **overrides})


def test_mini_batch_must_divide_the_batch():
    with pytest.raises(ConfigError, match=r"ppo.batch_size=48 sequences must divide the 64"):
        build("ppo", PPOConfig(unroll_length=16, batch_size=48), small_run())


@pytest.mark.user_compile
@pytest.mark.parametrize("env", ["gymnax:CartPole-v1", "gym:CartPole-v1"])
def test_same_seed_gives_identical_parameters(env, tmp_path):
    """A setup trained twice ends the same; another seed does not. (Trained twice rather
    than built twice: a Gymnasium env's programs have host callbacks, which JAX's persistent
    cache never keeps, so a second build would compile them again. A rebuilt run's equality
    is the resume and SIGKILL tests' claim.)"""
    seed_3 = build("ppo", SMALL_PPO, small_run(env=env, seed=3))
    seed_4 = build("ppo", SMALL_PPO, small_run(env=env, seed=4))
    summaries = [
        train(setup, str(tmp_path / name))
        for setup, name in [(seed_3, "a"), (seed_3, "b"), (seed_4, "c")]
    ]
    assert summaries[0]["params_digest"] == summaries[1]["params_digest"]
    assert summaries[0]["params_digest"] != summaries[2]["params_digest"]
    assert summaries[0]["final_eval_return"] == summaries[1]["final_eval_return"]


def test_run_directory_contents(small_ppo_run):
    run_dir, summary = small_ppo_run
    assert set(summary) >= {
        "run_dir",
        "steps",
        "wall_s",
        "steps_per_s",
        "final_eval_return",
        "best_eval_return",
        "params_digest",
    }
    assert summary["steps"] == 1024
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "ppo" and config["ppo"]["unroll_length"] == 16
    assert config["ppo"]["network"]["hidden_sizes"] == [64, 64]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["kind"] == "eval"]
    assert [e["step"] for e in evals] == [256, 512, 768, 1024]
    for line in evals:
        assert set(line) == {
            "kind",
            "step",
            "wall_s",
            "seed",
            "temperature",
            "return_mean",
            "return_std",
            "episodes",
        }
        assert line["episodes"] == 2 and line["temperature"] == 0.0
    assert summary["final_eval_return"] == evals[-1]["return_mean"]
    # One train line per call of the compiled program: 256 steps of 64-step iterations
    # (driver.HOST_VISIT_STEPS), which also end at every evaluation and checkpoint.
    train_lines = [line for line in lines if line["kind"] == "train"]
    assert [line["iteration"] for line in train_lines] == [4, 8, 12, 16]
    assert [line["step"] for line in train_lines] == [256, 512, 768, 1024]
    assert all(line["train/updates"] == 4 * 2 * (4 * 16 // 32) for line in train_lines)
    assert any(p.name.startswith("events") for p in (run_dir / "tb").iterdir())
    assert (run_dir / "checkpoints" / "16").is_dir()


def test_stop_at_return_ends_the_run_at_the_first_evaluation_that_reaches_it(tmp_path):
    """Every CartPole episode returns at least 8: a threshold of 5 is reached at the first
    evaluation (iteration 4 of 16); the run saves there and cannot be resumed further."""
    run_dir = tmp_path / "run"
    summary = train(
        build("ppo", SMALL_PPO, small_run(eval_every_n=4, stop_at_return=5.0)), str(run_dir)
    )
    assert summary["stopped_at_return"] is True and summary["steps"] == 256
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if line["kind"] == "eval"] == [256]
    assert [line["iteration"] for line in lines if line["kind"] == "train"] == [4]
    notes = [line for line in lines if line["kind"] == "note"]
    assert [note["topic"] for note in notes] == ["stop_at_return"]
    assert "reached stop_at_return=5 at step 256" in notes[0]["message"]
    assert summary["final_eval_return"] == summary["best_eval_return"] >= 5.0
    assert checkpoints.latest_step(str(run_dir)) == 4
    with pytest.raises(ConfigError, match="ended at step 256: its greedy return reached"):
        small_ppo.resume(run_dir)

    unreached = train(
        build("ppo", SMALL_PPO, small_run(eval_every_n=4, stop_at_return=1e6)),
        str(tmp_path / "unreached"),
    )
    assert unreached["stopped_at_return"] is False and unreached["steps"] == 1024


def test_refuses_a_non_empty_run_dir(tmp_path):
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(ConfigError, match="already exists"):
        train(build("ppo", SMALL_PPO, small_run()), str(tmp_path))
    assert (tmp_path / "x").read_text() == "keep me"


def test_a_gymnasium_iteration_compiles_once_into_one_program():
    """Host environments are stepped through callbacks inside the compiled iteration."""
    setup = build("ppo", SMALL_PPO, small_run(env="gym:CartPole-v1"))
    program = setup.program()
    state = program.init(seed_keys([0]))
    for _ in range(3):
        state, _ = program.iteration(state, np.int32(1))
    assert program.iteration._cache_size() == 1
    assert int(state.iteration[0]) == 3


@pytest.mark.user_compile
def test_one_call_of_three_iterations_is_three_calls_of_one():
    """The same program runs any count: the states are bit-equal, the metrics combined
    (what was learned averaged, updates summed). An exactness test, compiled as users' runs
    are: with most of XLA's optimisations off, the updates of a loop's later passes round
    differently from a call's (since resets are a branch of the environment's step)."""
    program = build().program()
    state, lines = program.init(seed_keys([0])), []
    for _ in range(3):
        state, metrics = program.iteration(state, np.int32(1))
        lines.append(jax.device_get(metrics))
    together, combined = program.iteration(program.init(seed_keys([0])), np.int32(3))
    chex.assert_trees_all_equal(jax.device_get(state), jax.device_get(together))
    assert int(together.iteration[0]) == 3
    assert combined["train/updates"][0] == sum(line["train/updates"][0] for line in lines)
    for name in ("loss/policy", "loss/value", "ppo/approx_kl"):
        mean = np.mean([line[name][0] for line in lines])
        np.testing.assert_allclose(combined[name][0], mean, rtol=1e-6)


def test_non_finite_loss_stops_training_and_writes_no_checkpoint(tmp_path):
    from conftest import CountingJaxEnv, CountingParams

    from heron import envs

    class NanRewardEnv(CountingJaxEnv):
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, jnp.float32(jnp.nan), terminated, info

    envs.register("NanReward-v0", lambda: (NanRewardEnv(), CountingParams()))
    setup = build("ppo", SMALL_PPO, small_run(env="heron:NanReward-v0", save_every_n=1))
    expected = (
        r"non-finite .*loss/total.* at step 64 \(the environment produced non-finite rewards\)"
        r".*no checkpoint was written yet: `heron train --resume .*` starts it again"
    )
    with pytest.raises(TrainingError, match=expected):
        train(setup, str(tmp_path / "run"))
    assert not any((tmp_path / "run" / "checkpoints").glob("*"))


def test_ppo_target_kl_stops_the_epochs_early():
    updates = {}
    for target_kl in (float("inf"), 1e-5):
        config = PPOConfig(
            unroll_length=16, batch_size=32, num_epochs=4, target_kl=target_kl, learning_rate=1e-2
        )
        program = build("ppo", config, small_run()).program()
        state = program.init(seed_keys([0]))
        _, metrics = program.iteration(state, np.int32(1))
        updates[target_kl] = float(metrics["train/updates"][0])
    assert updates[float("inf")] == 8  # 4 epochs x 2 mini-batches
    assert 1 <= updates[1e-5] < 8


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"run_dir": ""}, "run_dir must be a directory path"),
        ({"dataset": ""}, "dataset must be a directory path"),
        ({"eval_temperatures": (0.0, float("nan"))}, "eval_temperatures must be one or more"),
        ({"replay": "fifo"}, "replay must be one of None, one_time, uniform, cycle_one_time"),
        ({"updates_per_iteration": 10}, "updates_per_iteration sets the gradient updates"),
        ({"dataset": "data", "replay": "one_time"}, "replay='one_time' cannot serve it"),
        ({"dataset": "data", "separate_eval": False}, "keep separate_eval True"),
        ({"num_envs": 0}, "num_envs must be >= 1, got 0"),
        ({"stop_at_return": float("inf")}, "stop_at_return must be a finite number, got inf"),
        ({"stop_at_return": float("nan")}, "stop_at_return must be a number"),
    ],
)
def test_run_config_refuses_bad_values_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**overrides)


def test_a_registered_source_kind_checks_its_options_and_is_the_one_a_run_asks_for():
    """Sources of experience are a registry: a kind decides whether a run asks for it and
    checks its options whether or not it does; two kinds asked at once are refused."""
    from heron import sources

    checked = []
    kind = sources.SourceKind(
        "seeded-envs",
        lambda run: run.seed == 7,
        lambda run: checked.append(run.seed),
        lambda request: None,
    )
    sources.register(kind)
    try:
        run = RunConfig(seed=7)
        assert sources.asked_for(run) is kind and checked == [7]
        assert sources.asked_for(RunConfig()).name == "environments"
        with pytest.raises(ConfigError, match="drop --dataset or --seeded-envs"):
            RunConfig(seed=7, dataset="data")
    finally:
        sources._KINDS.pop("seeded-envs")
