import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron.agents import ConfigError, PPOConfig
from heron.agents.base import Agent, TrainSchedule
from heron.training import RunConfig, build, train
from heron.training.loop import train_on_batch

SMALL_PPO = PPOConfig(unroll_length=16, optimizer_batch_size=32, n_optimizer_steps=2)


def small_run(**overrides):
    settings = dict(steps=1024, num_envs=4, eval_every_n=8, n_evals=2, eval_temperatures=(0.0,))
    settings.update(overrides)
    return RunConfig(**settings)


def _counting_agent(num_updates, mini_batch_size, mini_batch_length, stop_after=None):
    """An agent whose state counts updates and records which sequences it saw."""

    def update(state, batch, key):
        seen = state["seen"].at[batch[0]].add(1)  # batch [L, M]: first step ids of sequences
        metrics = {"count": state["count"] + 1.0}
        return {"count": state["count"] + 1, "seen": seen}, metrics

    stop = (lambda m: m["count"] >= stop_after) if stop_after else None
    return Agent(
        name="counting",
        config=None,
        spec=None,
        schedule=TrainSchedule(4, num_updates, mini_batch_size, mini_batch_length),
        init=None,
        initial_carry=None,
        act=None,
        preprocess=None,
        update=update,
        params=lambda s: s,
        stop_updates=stop,
    )


def test_every_sequence_is_trained_once_per_pass():
    agent = _counting_agent(num_updates=3, mini_batch_size=2, mini_batch_length=2)
    batch = jnp.arange(16).reshape(4, 4)  # [B=4, T=4] step ids
    state = {"count": jnp.zeros((), jnp.int32), "seen": jnp.zeros(16, jnp.int32)}
    state, metrics = train_on_batch(agent, state, batch, jax.random.PRNGKey(0))
    # 8 sequences of length 2 -> 4 mini-batches per pass, 3 passes.
    assert int(state["count"]) == 12 and float(metrics["train/updates"]) == 12
    starts = np.arange(0, 16, 2)  # each sequence is contiguous: it starts at an even step
    np.testing.assert_array_equal(np.asarray(state["seen"])[starts], 3)
    assert np.asarray(state["seen"]).sum() == 24


def test_stop_updates_skips_the_rest():
    agent = _counting_agent(num_updates=4, mini_batch_size=2, mini_batch_length=1, stop_after=3)
    state = {"count": jnp.zeros((), jnp.int32), "seen": jnp.zeros(8, jnp.int32)}
    state, metrics = train_on_batch(
        agent, state, jnp.arange(8).reshape(2, 4), jax.random.PRNGKey(0)
    )
    assert int(state["count"]) == 3 and float(metrics["train/updates"]) == 3


def test_mini_batch_must_divide_the_batch():
    with pytest.raises(
        ConfigError, match=r"ppo.optimizer_batch_size=48 must divide .* 4 x 16 = 64"
    ):
        build("ppo", PPOConfig(unroll_length=16, optimizer_batch_size=48), small_run())


@pytest.mark.parametrize("env", ["gymnax:CartPole-v1", "gym:CartPole-v1"])
def test_same_seed_gives_identical_parameters(env, tmp_path):
    summaries = [
        train(build("ppo", SMALL_PPO, small_run(env=env, seed=seed)), str(tmp_path / name))
        for seed, name in [(3, "a"), (3, "b"), (4, "c")]
    ]
    assert summaries[0]["params_digest"] == summaries[1]["params_digest"]
    assert summaries[0]["params_digest"] != summaries[2]["params_digest"]
    assert summaries[0]["final_eval_return"] == summaries[1]["final_eval_return"]


def test_run_directory_contents(tmp_path):
    run_dir = tmp_path / "run"
    summary = train(build("ppo", SMALL_PPO, small_run(eval_every_n=4)), str(run_dir))
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
    assert len([line for line in lines if line["kind"] == "train"]) == 16
    assert any(p.name.startswith("events") for p in (run_dir / "tb").iterdir())
    assert (run_dir / "checkpoints" / "16").is_dir()


def test_refuses_a_non_empty_run_dir(tmp_path):
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(ConfigError, match="already exists"):
        train(build("ppo", SMALL_PPO, small_run()), str(tmp_path))
    assert (tmp_path / "x").read_text() == "keep me"


def test_host_mode_compiles_act_and_learn_once():
    from heron.training.driver import _seed_keys

    setup = build("ppo", SMALL_PPO, small_run(env="gym:CartPole-v1"))
    program = setup.program()
    state = program.init(_seed_keys([0]))
    for _ in range(3):
        state, _ = program.iteration(state)
    assert program.compiled_sizes() == (1, 1)  # act_step, finish: one program each


def test_non_finite_loss_stops_training_and_writes_no_checkpoint(tmp_path):
    from conftest import CountingJaxEnv, CountingParams

    from heron import envs
    from heron.training import TrainingError

    class NanRewardEnv(CountingJaxEnv):
        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, info = super().step_env(key, state, action, params)
            return obs, state, jnp.float32(jnp.nan), terminated, info

    envs.register("NanReward-v0", lambda: (NanRewardEnv(), CountingParams()))
    setup = build("ppo", SMALL_PPO, small_run(env="heron:NanReward-v0", save_every_n=1))
    with pytest.raises(TrainingError, match="non-finite .*loss/total.* at step 64"):
        train(setup, str(tmp_path / "run"))
    assert not any((tmp_path / "run" / "checkpoints").glob("*"))


def test_ppo_target_kl_stops_the_passes_early():
    from heron.training.driver import _seed_keys

    updates = {}
    for target_kl in (float("inf"), 1e-5):
        config = PPOConfig(
            unroll_length=16,
            optimizer_batch_size=32,
            n_optimizer_steps=4,
            target_kl=target_kl,
            learning_rate=1e-2,
        )
        program = build("ppo", config, small_run()).program()
        state = program.init(_seed_keys([0]))
        _, metrics = program.iteration(state)
        updates[target_kl] = float(metrics["train/updates"][0])
    assert updates[float("inf")] == 8  # 4 passes x 2 mini-batches
    assert 1 <= updates[1e-5] < 8
