"""heron train world-model: a next-token model on a collected CartPole dataset, its run
directory and plots, and --init-from it into a token PPO policy (the body copied exactly)."""

import json
import signal

import jax
import numpy as np
import pytest
from conftest import build

import heron
from heron import agents, api, envs, transfer, world_model
from heron.agents import PPOConfig
from heron.cli import cmd_train, main
from heron.networks.tokens import TokenConfig

TINY = TokenConfig(width=16, depth=1, heads=2, history=2)
TINY_FLAGS = [
    "--vocab-size", "16",
    "--tokens.width", "16",
    "--tokens.depth", "1",
    "--tokens.heads", "2",
    "--tokens.history", "2",
]  # fmt: skip


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """CartPole episodes collected from a (barely trained) token PPO policy."""
    root = tmp_path_factory.mktemp("world_model")
    config = PPOConfig(vocab_size=16, tokens=TINY, unroll_length=16, batch_size=32)
    run = heron.RunConfig(steps=512, num_envs=4, n_evals=2, eval_every_n=100)
    heron.train(build("ppo", config, run), str(root / "policy"))  # test_token_policy's run
    api.collect(str(root / "policy"), 60, str(root / "data"))
    return root / "data"


@pytest.fixture(scope="module")
def model_run(dataset, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("world_model_run") / "wm"
    argv = ["world-model", "--dataset", str(dataset), "--env", "gymnax:CartPole-v1"]
    argv += ["--run-dir", str(run_dir), "--steps", "400", "--eval-every-n", "200", *TINY_FLAGS]
    return run_dir, cmd_train(argv)  # `heron train world-model ...`: its JSON line's fields


def test_world_model_beats_a_unigram_baseline_on_held_out_tokens(model_run):
    _, summary = model_run
    assert summary["held_out_windows"] > 0 and summary["train_windows"] > 0
    assert summary["final_eval_accuracy"] > summary["unigram_accuracy"] + 0.1
    assert np.isfinite(summary["observation_error"])


def test_world_model_run_directory_and_plot(model_run, tmp_path):
    run_dir, summary = model_run
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "world-model" and config["world-model"]["vocab_size"] == 16
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["kind"] == "eval"]
    assert [line["step"] for line in evals] == [200, 400]
    for key in ("eval/next_token_accuracy", "eval/unigram_accuracy", "eval/observation_error"):
        assert np.isfinite(evals[-1][key])
    assert evals[-1]["return_mean"] == summary["final_eval_accuracy"]
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
    source = world_model.load_parameters(str(run_dir))
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
    assert recorded["copied"] == len(
        jax.tree.leaves(world_model.load_parameters(str(run_dir))["params"]["body"])
    )
    assert all(path.startswith("params/params/body/") for path in recorded["copied_paths"])


def test_a_resumed_world_model_run_equals_the_uninterrupted_one(
    dataset, tmp_path, capsys, monkeypatch
):
    """With standardised observations, as the README's example (their statistics are part
    of the run's record, and a resume must find them unchanged)."""

    def train(run_dir, steps):
        argv = ["world-model", "--dataset", str(dataset), "--run-dir", str(tmp_path / run_dir)]
        argv += ["--steps", str(steps), "--eval-every-n", "100", "--save-every-n", "200"]
        argv += ["--normalize-observations", "True"]
        return cmd_train([*argv, *TINY_FLAGS])

    def lines(run_dir):
        records = (tmp_path / run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(r).items() if k != "wall_s"} for r in records]

    straight = train("straight", 400)
    assert train("short", 200)["steps"] == 200
    resumed = cmd_train(["--resume", str(tmp_path / "short"), "--steps", "400"])
    assert resumed["steps"] == 400 and resumed["params_digest"] == straight["params_digest"]
    assert resumed["best_eval_accuracy"] == straight["best_eval_accuracy"]
    assert lines("short") == lines("straight")
    assert main(["train", "--resume", str(tmp_path / "short")]) == 2
    assert "has done its 400 steps" in capsys.readouterr().err

    # SIGTERM at step 100 (between two saves): it saves there, says so and stops; resumed,
    # the run ends as the uninterrupted one.
    evaluate, calls = world_model.evaluate, []

    def terminated_at_100(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGTERM)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(world_model, "evaluate", terminated_at_100)
    argv = ["train", "world-model", "--dataset", str(dataset), "--steps", "400"]
    argv += ["--run-dir", str(tmp_path / "stopped"), "--eval-every-n", "100"]
    argv += ["--save-every-n", "200", "--normalize-observations", "True", *TINY_FLAGS]
    assert main(argv) == 128 + signal.SIGTERM
    assert "SIGTERM at step 100: checkpoint 100 saved" in capsys.readouterr().err
    monkeypatch.undo()
    resumed = cmd_train(["--resume", str(tmp_path / "stopped")])
    assert resumed["params_digest"] == straight["params_digest"]


def test_a_world_model_run_has_no_policy_to_evaluate(model_run, capsys):
    run_dir, _ = model_run
    assert main(["eval", str(run_dir)]) == 2
    assert "is a world-model run: it has no policy" in capsys.readouterr().err


def test_world_model_needs_a_dataset(capsys):
    assert main(["train", "world-model", "--vocab-size", "16"]) == 2
    assert "give --dataset DIR" in capsys.readouterr().err


def test_world_model_is_not_an_agent():
    with pytest.raises(agents.UnknownAgentError):
        agents.config_class("world-model")


def test_discrete_observations_are_exact_tokens_for_the_world_model_too(tmp_path):
    """FrozenLake's 16 states: one token each, as a token policy writes them (the digits of
    a clipped Box made states 10..15 one token)."""
    import gymnasium

    from heron.offline import Episode, write_dataset

    states = np.arange(16)
    episode = Episode(
        observations=states.astype(np.int64),
        actions=np.zeros(15, np.int64),
        rewards=np.zeros(15, np.float64),
        terminations=np.zeros(15, bool),
        truncations=np.eye(15, dtype=bool)[-1],
    )
    spaces = gymnasium.spaces.Discrete(16), gymnasium.spaces.Discrete(4)
    write_dataset(tmp_path / "lake", [episode, episode], *spaces)  # one held out
    config = world_model.WorldModelConfig(
        dataset=str(tmp_path / "lake"), env="gym:FrozenLake-v1", vocab_size=16, tokens=TINY
    )
    data = world_model._prepare(config)
    assert data.layout.observation_tokens == 1
    action_ser = world_model._model_parts(1, envs.make(config.env).spec.action, config, 16)[1]
    serialized = world_model._serialize_episodes(
        data.dataset.episodes, data.observation_ser, action_ser
    )
    np.testing.assert_array_equal(serialized[0][0][:, 0], states)
