"""The token policy-and-value network (ppo.vocab_size): rewards-to-actions scattering,
per-control clipping, the actor's token history, causality, and runs through the API and
the command line."""

import json
import re

import compiled
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build

import heron
from heron import serialization
from heron.agents import NetworkConfig, PPOConfig
from heron.agents.ppo import clipped_surrogate
from heron.cli import main
from heron.configs import ConfigError
from heron.networks import tokens
from heron.networks.token_policy import TOKEN_VALID, TOKENS
from heron.networks.tokens import TokenConfig
from heron.specs import ActionSpec, EnvSpec
from heron.types import StepType, TimeStep

TINY = TokenConfig(width=16, depth=1, heads=2, history=2)
TINY_FLAGS = [
    "--ppo.vocab-size", "16",
    "--ppo.tokens.width", "16",
    "--ppo.tokens.depth", "1",
    "--ppo.tokens.heads", "2",
    "--ppo.tokens.history", "2",
]  # fmt: skip


# ----------------------------------------------------------------------------- rewards -> actions


@pytest.mark.parametrize("n_controls", [1, 3])
def test_each_control_gets_its_steps_advantage_like_a_plain_loop(n_controls):
    """Trax's rewards-to-actions map (the identity over controls): every control's clipped
    ratio is weighted by its step's advantage, and the controls are averaged."""
    rng = np.random.default_rng(0)
    advantage = rng.normal(size=(5, 4)).astype(np.float32)  # [T, B]
    log_ratio = rng.normal(0.0, 0.3, size=(5, 4, n_controls)).astype(np.float32)
    expected = np.zeros((5, 4), np.float32)
    for t in range(5):
        for b in range(4):
            for c in range(n_controls):
                r = np.exp(log_ratio[t, b, c])
                a = advantage[t, b]
                expected[t, b] += min(r * a, np.clip(r, 0.8, 1.2) * a) / n_controls
    got = np.asarray(clipped_surrogate(jnp.asarray(log_ratio), jnp.asarray(advantage), 0.2))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n_controls", [1, 2])
def test_serialized_map_scatters_advantages_onto_action_tokens_like_a_plain_loop(n_controls):
    observation = serialization.box_serialization((3,), 8, 2, clip_range=(-1.0, 1.0))
    action = serialization.action_serialization(
        ActionSpec("discrete", n_controls, 4, multi_control=n_controls > 1), 8
    )
    steps = 4  # T = 3 rewards, one more step for the bootstrap value
    layout = serialization.token_layout(observation, action, steps)
    per_step = np.arange(1.0, steps + 1, dtype=np.float32)[None]  # [1, T + 1]
    expected = np.zeros((1, layout.n_tokens), np.float32)
    position = 0
    for t in range(steps):
        position += observation.n_tokens
        for _ in range(n_controls):
            expected[0, position] = per_step[0, t]
            position += 1
    matrix = serialization.rewards_to_actions_map(layout)
    np.testing.assert_array_equal(
        np.asarray(serialization.scatter_to_actions(per_step, matrix)), expected
    )


# ----------------------------------------------------------------------------- clipping


def test_one_control_surrogate_is_ppos_clipped_objective():
    log_ratio = jnp.array([[0.5, -0.5, 0.05]])
    advantage = jnp.array([[1.0, -2.0, 3.0]])
    ratio = np.exp(np.asarray(log_ratio))
    expected = np.minimum(ratio * advantage, np.clip(ratio, 0.8, 1.2) * advantage)
    np.testing.assert_allclose(clipped_surrogate(log_ratio, advantage, 0.2), expected, 1e-6)


def test_each_control_is_clipped_separately_not_jointly():
    # Two controls moving in opposite directions: the joint ratio is 1 (never clipped), but
    # each control's own ratio leaves [0.8, 1.2] and is clipped on its own.
    log_ratio = jnp.array([[[0.3, -0.3]]])  # [T, B, k]
    advantage = jnp.array([[1.0]])
    per_control = float(clipped_surrogate(log_ratio, advantage, 0.2)[0, 0])
    expected = (min(np.exp(0.3), 1.2) + min(np.exp(-0.3), np.exp(-0.3))) / 2
    assert per_control == pytest.approx(expected, rel=1e-6)
    joint = float(clipped_surrogate(jnp.sum(log_ratio, -1), advantage, 0.2)[0, 0])
    assert joint == pytest.approx(1.0)
    assert abs(per_control - joint) > 0.02
    # and the gradients differ: the clipped control gets none under per-control clipping
    grad = jax.grad(lambda x: clipped_surrogate(x, advantage, 0.2)[0, 0])(log_ratio)
    assert float(grad[0, 0, 0]) == 0.0 and float(grad[0, 0, 1]) != 0.0
    joint_grad = jax.grad(lambda x: clipped_surrogate(jnp.sum(x, -1), advantage, 0.2)[0, 0])
    assert float(joint_grad(log_ratio)[0, 0, 0]) != 0.0


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": TINY}, "ppo.tokens.* configure the token network: add --ppo.vocab-size"),
        ({"vocab_size": 1}, "ppo.vocab_size must be in [2, 65536]"),
        (
            {"vocab_size": 16, "tokens": TokenConfig(width=30, heads=4)},
            "ppo.tokens.width=30 must be a multiple of ppo.tokens.heads=4",
        ),
        ({"vocab_size": 16, "tokens": TokenConfig(history=0)}, "ppo.tokens.history must be"),
        (
            {"vocab_size": 16, "network": NetworkConfig(hidden_sizes=(8,)), "two_towers": False},
            "ppo.network.hidden_sizes=(8,), ppo.two_towers=False configure the vector network",
        ),
    ],
)
def test_bad_token_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        PPOConfig(**kwargs)


def test_box_actions_are_refused_for_a_token_policy():
    spec = EnvSpec((3,), np.float32, ActionSpec("continuous", shape=(1,), low=(-2.0,), high=(2.0,)))
    with pytest.raises(ValueError, match="Box action space of shape .* refused for serialized"):
        compiled.make("ppo", spec, PPOConfig(vocab_size=16, tokens=TINY))


def test_more_actions_than_the_vocabulary_are_refused():
    spec = EnvSpec((3,), np.float32, ActionSpec("discrete", 1, 20))
    with pytest.raises(ValueError, match="20 categories cannot be written"):
        compiled.make("ppo", spec, PPOConfig(vocab_size=16, tokens=TINY))


def test_discrete_observations_are_one_exact_token_per_value():
    """Trax writes a Discrete observation as its value's own token: states 10..15 of
    Discrete(16) stay distinct (digits clipped to a range of 10 made them one token), and a
    space larger than the vocabulary is refused by name."""
    spec = EnvSpec((), np.float32, ActionSpec("discrete", 1, 2), observation_categories=16)
    agent = compiled.make("ppo", spec, PPOConfig(vocab_size=16, tokens=TINY))
    state, states = agent.init(jax.random.PRNGKey(0)), jnp.arange(16)
    timestep = TimeStep(
        step_type=jnp.full((16,), StepType.FIRST),
        reward=jnp.zeros(16),
        discount=jnp.ones(16),
        observation=states.astype(jnp.float32),
    )
    _, _, extras = agent.act(state, timestep, agent.initial_carry(16), jax.random.PRNGKey(1))
    layout = serialization.TokenLayout(observation_tokens=1, action_tokens=1, n_steps=2)
    np.testing.assert_array_equal(extras[TOKENS][:, layout.observation_positions[-1, 0]], states)
    larger = EnvSpec((), np.float32, ActionSpec("discrete", 1, 2), observation_categories=17)
    with pytest.raises(ValueError, match="17 categories cannot be written in a vocabulary of"):
        compiled.make("ppo", larger, PPOConfig(vocab_size=16, tokens=TINY))


# ----------------------------------------------------------------------------- history, model


def test_history_is_right_aligned_and_forgotten_at_episode_starts():
    layout = serialization.TokenLayout(observation_tokens=2, action_tokens=1, n_steps=3)
    history = tokens.initial_history(layout, (2,))
    first = jnp.array([True, True])
    history = tokens.push(history, jnp.array([[1, 1], [2, 2]]), first)
    history = tokens.with_actions(history, jnp.array([[5], [6]]))
    history = tokens.push(history, jnp.array([[3, 3], [4, 4]]), jnp.array([False, True]))
    window, valid = tokens.window(layout, history)
    np.testing.assert_array_equal(valid, [[False, True, True], [False, False, True]])
    np.testing.assert_array_equal(window[0, 3:], [1, 1, 5, 3, 3, 0])
    np.testing.assert_array_equal(window[1, 6:], [4, 4, 0])


def test_a_controls_logits_do_not_depend_on_later_tokens():
    layout = serialization.TokenLayout(observation_tokens=3, action_tokens=2, n_steps=2)
    module = tokens.TokenPolicyValue(8, layout, 4, TINY)
    window = jax.random.randint(jax.random.PRNGKey(1), (1, layout.n_tokens), 0, 4)
    valid = jnp.ones((1, 2), bool)
    params = module.init(jax.random.PRNGKey(0), window, valid)
    out = module.apply(params, window, valid)
    changed = window.at[0, -1].set((window[0, -1] + 1) % 4)  # the last control's token
    again = module.apply(params, changed, valid)
    np.testing.assert_array_equal(out["policy"], again["policy"])  # read before it
    np.testing.assert_array_equal(out["value"], again["value"])
    earlier = window.at[0, layout.action_positions[-1, 0]].set(
        (window[0, layout.action_positions[-1, 0]] + 1) % 4
    )
    moved = module.apply(params, earlier, valid)["policy"]
    np.testing.assert_array_equal(out["policy"][:, 0], moved[:, 0])
    assert not np.array_equal(out["policy"][:, 1], moved[:, 1])  # control 1 sees control 0


@pytest.mark.parametrize("vocab_size", [None, 16])
def test_several_controls_act_with_a_log_prob_per_control(vocab_size):
    spec = EnvSpec((3,), np.float32, ActionSpec("discrete", 2, 3, multi_control=True))
    config = PPOConfig(vocab_size=vocab_size, tokens=TINY if vocab_size else TokenConfig())
    agent = compiled.make("ppo", spec, config)
    state = agent.init(jax.random.PRNGKey(0))
    carry = agent.initial_carry(4)
    timestep = TimeStep(
        step_type=jnp.full((4,), StepType.FIRST),
        reward=jnp.zeros(4),
        discount=jnp.ones(4),
        observation=jnp.ones((4, 3)),
    )
    action, carry, extras = agent.act(state, timestep, carry, jax.random.PRNGKey(1))
    assert action.shape == (4, 2) and extras["log_prob"].shape == (4, 2)
    assert np.all(np.asarray(extras["log_prob"]) <= 0.0)
    if vocab_size:
        assert extras[TOKENS].shape == (4, 2 * (3 * 2 + 2))
        np.testing.assert_array_equal(extras[TOKENS][:, -2:], action)  # the actions taken
        np.testing.assert_array_equal(extras[TOKEN_VALID], [[False, True]] * 4)
    greedy, _ = agent.policy(state, timestep, agent.initial_carry(4), jax.random.PRNGKey(2), 0.0)
    assert greedy.shape == (4, 2)


# ----------------------------------------------------------------------------- runs


def test_token_ppo_runs_through_the_api(tmp_path):
    config = PPOConfig(vocab_size=16, tokens=TINY, unroll_length=16, batch_size=32)
    run = heron.RunConfig(steps=512, num_envs=4, n_evals=2, eval_every_n=8)
    summary = heron.train(build("ppo", config, run), str(tmp_path / "run"))  # as the CLI's
    assert summary["steps"] == 512 and summary["final_eval_return"] > 0
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["ppo"]["vocab_size"] == 16 and recorded["ppo"]["tokens"]["width"] == 16
    policy = heron.load(str(tmp_path / "run"))
    assert policy(np.zeros(4, np.float32)) in (0, 1)


def test_token_ppo_runs_through_the_command_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--run-dir", str(run_dir), "--steps", "512", "--num-envs", "4"]
    argv += ["--n-evals", "2", "--ppo.unroll-length", "16", "--ppo.batch-size", "32"]
    assert main(argv + TINY_FLAGS) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 512
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["params_digest"] == summary["params_digest"]


def test_bad_token_options_fail_in_one_line(capsys):
    assert main(["train", "ppo", "--ppo.tokens.width", "32"]) == 2
    assert "add --ppo.vocab-size V" in capsys.readouterr().err
    assert main(["train", "ppo", "--env", "gymnax:Pendulum-v1", *TINY_FLAGS]) == 2
    assert "refused for serialized policies" in capsys.readouterr().err


# The README's token-policy settings for CartPole (a user runs them as they are).
CARTPOLE_TOKENS = [
    "--preset", "none", "--num-envs", "16", "--normalize-observations", "True",
    "--reward-scale", "0.1", "--ppo.vocab-size", "32", "--ppo.tokens.precision", "1",
    "--ppo.tokens.observation-range", "3", "--ppo.tokens.width", "32",
    "--ppo.tokens.depth", "1", "--ppo.tokens.heads", "2", "--ppo.tokens.history", "2",
    "--ppo.learning-rate", "5e-4", "--ppo.batch-size", "128",
]  # fmt: skip


@pytest.mark.slow
def test_token_ppo_learns_cartpole(tmp_path, capsys):
    """Measured with these settings: seed 0 alone reaches greedy 387 at 20k steps and 430
    at 26k (500 from 36k on); three seeds in one program (--seeds 3) first reach >= 400 at
    18k, 10k and 49k steps; compiled as unit tests on a Zen 3 CPU (2026-12-07), seeds 0-3
    alone first at 31k, 10k, 33k and 13k. This run (seed 1 alone: 498 at 10k there) must
    reach greedy >= 400 within 82k steps, a margin over the slowest seed for another
    machine's trajectory; it ends at the first evaluation that does (--stop-at-return)."""
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--steps", "81920", "--seed", "1", "--eval-every-n", "5"]
    argv += ["--n-evals", "8"]
    argv += ["--eval-temperatures", "0", "--stop-at-return", "400"]
    argv += ["--run-dir", str(run_dir), *CARTPOLE_TOKENS]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["best_eval_return"] >= 400
