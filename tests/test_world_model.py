"""heron train world-model: a next-token model trained through the driver from the dataset
source (a collected CartPole dataset), scored on held-out episodes; its run directory and
plots, resume, and --init-from it into a token PPO policy (the body copied exactly)."""

import json
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build

import heron
from heron import api, envs, transfer
from heron.agents import PPOConfig
from heron.agents import world_model as wm
from heron.cli import cmd_train, main
from heron.networks.tokens import TokenConfig
from heron.training import driver, rundir
from heron.types import Experience, StepType

TINY = TokenConfig(width=16, depth=1, heads=2, history=2)
TINY_FLAGS = [
    "--vocab-size", "16",
    "--tokens.width", "16",
    "--tokens.depth", "1",
    "--tokens.heads", "2",
    "--tokens.history", "2",
]  # fmt: skip
MODEL_FLAGS = [flag.replace("--", "--world-model.", 1) for flag in TINY_FLAGS]
QUANTITY = "held-out next-token accuracy"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """CartPole episodes collected from a (barely trained) token PPO policy."""
    root = tmp_path_factory.mktemp("world_model")
    config = PPOConfig(vocab_size=16, tokens=TINY, unroll_length=16, batch_size=32)
    run = heron.RunConfig(steps=512, num_envs=4, n_evals=2, eval_every_n=100)
    heron.train(build("ppo", config, run), str(root / "policy"))  # test_token_policy's run
    api.collect(str(root / "policy"), 60, str(root / "data"))
    return root / "data"


def _argv(dataset, run_dir, steps, *more):
    """`heron train world-model` on the dataset: iterations of 100 updates, each scored."""
    argv = ["world-model", "--dataset", str(dataset), "--env", "gymnax:CartPole-v1"]
    argv += ["--run-dir", str(run_dir), "--steps", str(steps), "--updates-per-iteration", "100"]
    return [*argv, "--eval-every-n", "1", *MODEL_FLAGS, *more]


@pytest.fixture(scope="module")
def model_run(dataset, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("world_model_run") / "wm"
    return run_dir, cmd_train(_argv(dataset, run_dir, 400))  # its JSON line's fields


def test_world_model_beats_the_most_frequent_token_on_held_out_episodes(model_run):
    _, summary = model_run
    assert summary["quantity"] == QUANTITY and summary["steps"] == 400
    baseline = summary["eval/most_frequent_token_accuracy"]
    assert summary["final_eval_return"] > baseline + 0.1
    assert summary["final_eval_return"] == summary["eval/next_token_accuracy"]
    assert np.isfinite(summary["eval/observation_error"])
    assert np.isfinite(summary["eval/reward_error"])


def test_world_model_run_directory_and_plot(model_run, tmp_path):
    run_dir, summary = model_run
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "world-model" and config["world-model"]["vocab_size"] == 16
    held_out = config["dataset"]["held_out_episodes"]
    assert len(held_out) == 6 and len(set(held_out)) == 6  # 10% of the 60 episodes
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["kind"] == "eval"]
    assert [line["step"] for line in evals] == [100, 200, 300, 400]
    assert {line["quantity"] for line in evals} == {QUANTITY}
    assert all(line["episodes"] == 6 and line["temperature"] == 0.0 for line in evals)
    for key in ("eval/next_token_accuracy", "eval/most_frequent_token_accuracy"):
        assert 0.0 <= evals[-1][key] <= 1.0
    assert evals[-1]["return_mean"] == summary["final_eval_return"]
    trained = [line for line in lines if line["kind"] == "train"]
    assert [line["train/updates"] for line in trained] == [100] * 4
    assert (run_dir / "checkpoints").is_dir() and (run_dir / "tb").is_dir()
    out = tmp_path / "curve.png"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 0
    assert out.stat().st_size > 0


def _token_agent(init_from=None, tokens=TINY):
    run = heron.RunConfig(num_envs=4, init_from=None if init_from is None else str(init_from))
    config = PPOConfig(vocab_size=16, tokens=tokens, unroll_length=16, batch_size=32)
    return heron.build("ppo", config, run).agent


def test_init_from_a_world_model_copies_exactly_the_body(model_run):
    run_dir, _ = model_run
    source = api.source_parameters(str(run_dir)).params
    key = jax.random.PRNGKey(3)
    initialised = _token_agent(run_dir).init(key).params
    fresh = _token_agent().init(key).params
    body = transfer.leaves_by_path(source["params"]["body"])
    copied = transfer.leaves_by_path(initialised["params"]["body"])
    assert body.keys() == copied.keys() and len(body) > 10
    for path, leaf in body.items():
        np.testing.assert_array_equal(copied[path], leaf, err_msg="/".join(path))
    for head in ("policy_logits", "value_head"):  # the heads are the policy's own, fresh
        for a, b in zip(
            jax.tree.leaves(initialised["params"][head]),
            jax.tree.leaves(fresh["params"][head]),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)


def test_init_from_a_world_model_of_another_history_is_refused(model_run):
    run_dir, _ = model_run
    with pytest.raises(transfer.TransferError, match="position_embedding"):
        _token_agent(run_dir, TokenConfig(width=16, depth=1, heads=2, history=3))


def test_token_ppo_trains_from_a_world_model_on_the_command_line(model_run, tmp_path, capsys):
    run_dir, _ = model_run
    policy_dir = tmp_path / "policy"
    argv = ["train", "ppo", "--run-dir", str(policy_dir), "--steps", "256", "--num-envs", "4"]
    argv += ["--n-evals", "1", "--ppo.unroll-length", "16", "--ppo.batch-size", "32"]
    argv += ["--init-from", str(run_dir)] + [flag.replace("--", "--ppo.", 1) for flag in TINY_FLAGS]
    assert main(argv) == 0
    assert "initialised from" in capsys.readouterr().err
    recorded = json.loads((policy_dir / "config.json").read_text())["init_from"]
    body = api.source_parameters(str(run_dir)).params["params"]["body"]
    assert recorded["copied"] == len(jax.tree.leaves(body))
    assert all(path.startswith("params/params/body/") for path in recorded["copied_paths"])


def test_a_resumed_world_model_run_equals_the_uninterrupted_one(
    dataset, tmp_path, capsys, monkeypatch
):
    """With standardised observations, as the README's example (the training episodes'
    statistics), saved every other iteration."""

    def train(run_dir, steps):
        more = ("--normalize-observations", "--save-every-n", "2")
        return cmd_train(_argv(dataset, tmp_path / run_dir, steps, *more))

    def lines(run_dir):
        records = (tmp_path / run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(r).items() if k != "wall_s"} for r in records]

    straight = train("straight", 400)
    assert train("short", 200)["steps"] == 200
    resumed = cmd_train(["--resume", str(tmp_path / "short"), "--steps", "400"])
    assert resumed["steps"] == 400 and resumed["params_digest"] == straight["params_digest"]
    assert resumed["best_eval_return"] == straight["best_eval_return"]
    assert lines("short") == lines("straight")
    assert main(["train", "--resume", str(tmp_path / "short"), "--steps", "300"]) == 2
    assert "already past 300 steps" in capsys.readouterr().err

    # SIGTERM in the first iteration (before its checkpoint is due): it saves there, says
    # so and stops; resumed, the run ends as the uninterrupted one.
    iterations = driver._Loop._iterations

    def terminated_in_the_first(loop, state, done, count, first):
        if done == 0:
            signal.raise_signal(signal.SIGTERM)
        return iterations(loop, state, done, count, first)

    monkeypatch.setattr(driver._Loop, "_iterations", terminated_in_the_first)
    argv = ["train", *_argv(dataset, tmp_path / "stopped", 400)]
    argv += ["--normalize-observations", "--save-every-n", "2"]
    assert main(argv) == 128 + signal.SIGTERM
    assert "SIGTERM at step 100: checkpoint 1 saved" in capsys.readouterr().err
    monkeypatch.undo()
    resumed = cmd_train(["--resume", str(tmp_path / "stopped")])
    assert resumed["params_digest"] == straight["params_digest"]


def test_a_world_model_run_has_no_policy_to_evaluate_or_load(model_run, capsys):
    run_dir, _ = model_run
    assert main(["eval", str(run_dir)]) == 2
    assert "a model without a policy: it has none to evaluate" in capsys.readouterr().err
    with pytest.raises(rundir.RunDirError, match="none to act with"):
        heron.load(str(run_dir))


def test_world_model_needs_a_dataset_and_no_environment_evaluation(dataset, capsys):
    assert main(["train", "world-model", "--world-model.vocab-size", "16"]) == 2
    err = capsys.readouterr().err
    assert "world-model is a model without a policy" in err and "give --dataset DIR" in err
    argv = ["train", "world-model", "--dataset", str(dataset), "--n-evals", "4", *MODEL_FLAGS]
    assert main(argv) == 2
    assert "n_evals=4 sets the evaluation in the environment" in capsys.readouterr().err


def _frozen_lake_codec():
    config = wm.WorldModelConfig(vocab_size=16, tokens=TINY)
    return wm.codec(envs.make("gym:FrozenLake-v1").spec, config)


def test_discrete_observations_are_exact_tokens_for_the_world_model_too():
    """FrozenLake's 16 states: one token each, as a token policy writes them (the digits of
    a clipped Box made states 10..15 one token)."""
    codec = _frozen_lake_codec()
    assert codec.layout.observation_tokens == 1 and codec.categorical
    states = np.arange(16, dtype=np.float32)  # observations of shape ()
    np.testing.assert_array_equal(codec.observation_tokens(states)[:, 0], np.arange(16))


def _reference_windows(step_type, observation, action, reward, history):
    """Plain loops: the window of steps 0..K-1 of each sequence [K + 1] (time-major in)."""
    length, batch = step_type.shape
    k = history
    tokens = np.zeros((batch, 2 * k), np.int32)
    valid = np.zeros((batch, k), bool)
    targets = np.zeros((batch, 2 * k), bool)
    rewards, has_reward = np.zeros(batch, np.float32), np.zeros(batch, bool)
    for m in range(batch):
        for j in range(k):
            valid[m, j] = all(step_type[i, m] != StepType.FIRST for i in range(j + 1, k))
        predicted = np.zeros(2 * k, bool)
        for j in range(k):
            if valid[m, j]:
                tokens[m, 2 * j] = observation[j, m]
                tokens[m, 2 * j + 1] = action[j, m]
                predicted[2 * j] = True
                predicted[2 * j + 1] = step_type[j, m] != StepType.LAST
        for p in range(2 * k - 1):
            targets[m, p] = valid[m, p // 2] and predicted[p + 1]
        rewards[m] = reward[k, m]
        has_reward[m] = step_type[k - 1, m] != StepType.LAST
    return tokens, valid, targets, rewards, has_reward


def test_windows_match_a_plain_loop_reference():
    """Sequences crossing episode starts and ends, against the plain loops."""
    codec = _frozen_lake_codec()
    k = codec.layout.n_steps
    rng = np.random.default_rng(0)
    length, batch = k + 1, 64
    step_type = rng.choice([StepType.FIRST, StepType.MID, StepType.LAST], (length, batch))
    observation = rng.integers(0, 16, (length, batch)).astype(np.float32)
    action = rng.integers(0, 4, (length, batch)).astype(np.int32)
    reward = rng.normal(size=(length, batch)).astype(np.float32)
    steps = Experience(step_type, reward, np.ones_like(reward), observation, action)
    got = wm.windows(codec, jax.tree.map(jnp.asarray, steps))
    want = _reference_windows(step_type, observation, action, reward, k)
    for name, a, b in zip(wm.Windows._fields, got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), b, err_msg=name)


def test_every_window_ends_at_each_step_in_turn():
    steps = Experience(*(np.arange(5) for _ in range(5)))
    sequences = wm.every_window(jax.tree.map(jnp.asarray, steps), 3)
    np.testing.assert_array_equal(
        sequences.reward, [[0, 0, 1, 2, 3], [0, 1, 2, 3, 4], [1, 2, 3, 4, 4]]
    )
