"""SAC: loss pieces by hand (twin-critic minimum in the target, temperature loss, entropy
term in the policy loss), the update's wiring, Polyak targets, restart masking, recurrent
resets, bad input, the CLI, and (slow) learning on Pendulum from its preset."""

import dataclasses
import json
from typing import Any, NamedTuple

import compiled
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron.agents import ConfigError, SACConfig, actor_critic, learning, sac
from heron.agents.base import ROLLOUT_STATE, ReplayConfig
from heron.networks import NetworkConfig
from heron.specs import EnvSpec, action_spec_from_space
from heron.types import Experience, StepType, TimeStep

BOX = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Box(-2.0, 2.0, (1,))))
BOX2 = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Box(-1.0, 1.0, (2,))))
DISCRETE = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))
MULTI = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.MultiDiscrete([3, 3])))
SMALL = dict(
    network=NetworkConfig(hidden_sizes=(16, 16), activation="relu"),
    sequence_length=5,
)
LENGTH, BATCH = 5, 6


def _sequences(length=LENGTH, batch=BATCH, seed=0, state=None):
    """Sequences [S, B] as the driver hands them to ``update``: sequence 0 ends an episode at
    step 2 (LAST, truncated) and starts the next at step 3 (FIRST); sequence 1 terminates
    at step 2 (discount 0)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    state = {} if state is None else {ROLLOUT_STATE: state}
    step_type = (
        jnp.full((length, batch), StepType.MID, jnp.int32)
        .at[2, 0]
        .set(StepType.LAST)
        .at[3, 0]
        .set(StepType.FIRST)
    )
    reward = jax.random.normal(keys[0], (length, batch)).at[3, 0].set(0.0)
    return Experience(
        step_type=step_type,
        reward=reward,
        discount=jnp.ones((length, batch)).at[2, 1].set(0.0),
        observation=jax.random.normal(keys[1], (length, batch, 3)),
        action=jax.random.uniform(keys[2], (length, batch, 1), minval=-1.9, maxval=1.9),
        extras={"log_prob": jax.random.normal(keys[3], (length, batch)) * 0.3, **state},
    )


def _recurrent(core):
    return dataclasses.replace(SMALL["network"], core=core, core_size=8)


class Terms(NamedTuple):
    """What one update computes from a batch; [T, B] unless noted."""

    alpha: Any  # []
    mask: Any
    next_q: Any  # the target critics at (s_{t+1}, a') [2, T, B]
    next_log_prob: Any  # log pi(a'|s_{t+1})
    target: Any  # the soft TD targets
    online_q: Any  # the critics at the taken actions [2, T, B]
    log_prob: Any  # log pi(a|s_t) of the policy's samples at steps 0..T-1


def _terms_of(spec, config):
    """``terms(state, batch [S, B], key) -> Terms``: what ``update`` computes from the same
    arguments, from sac's loss functions."""
    networks = sac.networks(spec, config)
    hyper = learning.Hyperparameters(config, ("discount",))

    def terms(state, batch, key):
        inputs = sac.inputs_of(networks, config, batch)
        gamma = hyper("discount", state.update_step, state.controls)
        actions, log_probs = sac.policy_samples(networks, state.policy_params, inputs, key)
        target, next_q = sac.targets(networks, state, inputs, actions[1:], log_probs[1:], gamma)
        _, online_q = sac.critic_loss(state.critic_params, networks, inputs, target)
        return Terms(
            alpha=jnp.exp(state.log_alpha),
            mask=inputs.mask,
            next_q=next_q,
            next_log_prob=log_probs[1:],
            target=target,
            online_q=online_q,
            log_prob=log_probs[:-1],
        )

    return terms


def _agent(spec=BOX, **overrides):
    config = SACConfig(**{**SMALL, **overrides})
    return compiled.make("sac", spec, config), _terms_of(spec, config), config


# ----------------------------------------------------------------- loss pieces by hand


def test_soft_target_takes_the_smaller_of_the_twin_critics():
    reward = jnp.array([[1.0, -2.0]])  # [T=1, B=2]
    discount = jnp.array([[0.9, 0.0]])  # the second transition terminates
    next_q = jnp.array([[[5.0, 7.0]], [[3.0, 9.0]]])  # [2, T, B]: critic 2 is lower for b=0
    next_log_prob = jnp.array([[-1.0, 0.5]])
    target = sac.soft_target(reward, discount, next_q, next_log_prob, 0.2)
    expected = [[1.0 + 0.9 * (3.0 - 0.2 * -1.0), -2.0 + 0.0 * (7.0 - 0.2 * 0.5)]]
    np.testing.assert_allclose(target, expected, rtol=1e-6)


def test_critic_loss_sums_both_critics_over_unmasked_transitions():
    q = jnp.array([[[1.0, 2.0], [0.0, 0.0]], [[3.0, 2.0], [1.0, 5.0]]])  # [2, T=2, B=2]
    target = jnp.array([[2.0, 2.0], [1.0, 1.0]])
    mask = jnp.array([[1.0, 1.0], [0.0, 1.0]])
    per_step = 0.5 * ((np.asarray(q) - np.asarray(target)) ** 2).sum(axis=0)
    expected = (per_step[0, 0] + per_step[0, 1] + per_step[1, 1]) / 3
    assert float(sac.critic_loss_from(q, target, mask)) == pytest.approx(expected)
    assert expected == pytest.approx((0.5 * (1 + 1) + 0.0 + 0.5 * (1 + 16)) / 3)


def test_policy_loss_is_the_entropy_term_minus_the_smaller_critic():
    q = jnp.array([[[1.0, 4.0]], [[2.0, 3.0]]])  # [2, T=1, B=2]
    log_prob = jnp.array([[-1.0, 2.0]])
    mask = jnp.ones((1, 2))
    expected = ((0.5 * -1.0 - 1.0) + (0.5 * 2.0 - 3.0)) / 2
    assert float(sac.policy_loss_from(q, log_prob, 0.5, mask)) == pytest.approx(expected)
    # With alpha 0 only -min Q is left; a higher entropy (lower log pi) lowers the loss.
    assert float(sac.policy_loss_from(q, log_prob, 0.0, mask)) == pytest.approx(-2.0)
    lower = sac.policy_loss_from(q, log_prob - 1.0, 0.5, mask)
    assert float(lower) == pytest.approx(expected - 0.5)
    # The gradient reaches the log-probabilities (alpha / count each) but never alpha.
    grad_log_prob = jax.grad(lambda lp: sac.policy_loss_from(q, lp, 0.5, mask))(log_prob)
    np.testing.assert_allclose(grad_log_prob, [[0.25, 0.25]])
    grad_alpha = jax.grad(lambda a: sac.policy_loss_from(q, log_prob, a, mask))(0.5)
    assert float(grad_alpha) == 0.0


def test_temperature_loss_and_its_gradient_by_hand():
    log_prob = jnp.array([[0.5, 1.5], [-3.0, 9.0]])  # [T=2, B=2]
    mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    log_alpha, target_entropy = jnp.log(0.3), -1.0
    terms = [0.5 - 1.0, 1.5 - 1.0, -3.0 - 1.0]  # log pi + target entropy, unmasked
    expected = -float(log_alpha) * sum(terms) / 3
    loss = sac.alpha_loss_from(log_alpha, log_prob, target_entropy, mask)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    grad = jax.grad(sac.alpha_loss_from)(log_alpha, log_prob, target_entropy, mask)
    assert float(grad) == pytest.approx(-sum(terms) / 3)
    # Entropy (-log pi) below the target: descending the gradient raises alpha.
    low_entropy = jnp.full((2, 2), 3.0)  # entropy -3 < -1
    assert float(jax.grad(sac.alpha_loss_from)(log_alpha, low_entropy, -1.0, mask)) < 0
    high_entropy = jnp.full((2, 2), -3.0)  # entropy 3 > -1
    assert float(jax.grad(sac.alpha_loss_from)(log_alpha, high_entropy, -1.0, mask)) > 0


# ----------------------------------------------------------------- acting


def test_act_samples_in_the_box_and_temperature_zero_is_the_mean_action():
    agent, _, _ = _agent()
    state = agent.init(jax.random.PRNGKey(0))
    observation = jax.random.normal(jax.random.PRNGKey(1), (2048, 3))
    timestep = TimeStep(jnp.ones(2048, jnp.int32), jnp.zeros(2048), jnp.ones(2048), observation)
    carry = agent.initial_carry(2048)
    action, carry, extras = agent.act(state, timestep, carry, jax.random.PRNGKey(2))
    assert action.shape == (2048, 1) and jax.tree.leaves(carry) == []
    assert float(action.min()) >= -2.0 and float(action.max()) <= 2.0
    policy = sac.networks(BOX, agent.config).policy
    head = policy.step(state.policy_params, (), observation, timestep.is_first())[1]
    expected = actor_critic.tanh_gaussian(head).log_prob(action / 2.0)
    np.testing.assert_allclose(extras["log_prob"], expected, rtol=1e-4, atol=1e-4)
    assert float(jnp.std(action)) > 0.3  # the initial policy explores
    greedy, _ = agent.policy(state, timestep, agent.initial_carry(2048), jax.random.key(3), 0.0)
    np.testing.assert_allclose(greedy / 2.0, np.tanh(head["mean"]), atol=1e-6)
    sampled, _ = agent.policy(state, timestep, agent.initial_carry(2048), jax.random.key(3), 1.0)
    assert not np.allclose(sampled, greedy)


# ----------------------------------------------------------------- the update


def test_update_wires_the_twin_target_the_masks_and_the_critic_loss():
    agent, terms_of, config = _agent(discount=0.9, initial_alpha=0.7)
    state = agent.init(jax.random.PRNGKey(0))
    # Targets that differ from the online critics, so the test tells them apart.
    state = state._replace(
        target_critic_params=jax.tree.map(lambda x: x + 0.05, state.target_critic_params)
    )
    batch, key = _sequences(), jax.random.PRNGKey(5)
    terms = terms_of(state, batch, key)
    mask = np.ones((LENGTH - 1, BATCH))
    mask[2, 0] = 0.0  # the transition out of LAST step 2 into FIRST step 3
    np.testing.assert_array_equal(terms.mask, mask)
    assert float(terms.alpha) == pytest.approx(0.7)
    critic = sac.networks(BOX, config).critics.network
    first = batch.step_type == StepType.FIRST
    # The target critics at the policy's sampled next actions, recomputed by hand.
    policy = sac.networks(BOX, config).policy
    head = policy.step(state.policy_params, (), batch.observation, first)[1]
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(BATCH))
    sample = jax.vmap(
        lambda h, k: actor_critic.tanh_gaussian(h).sample_and_log_prob(k, sample_shape=(1,)),
        in_axes=(1, 0),
        out_axes=(2, 2),
    )
    actions, log_probs = (x[0] for x in sample(head, keys))
    np.testing.assert_allclose(terms.next_log_prob, log_probs[1:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(terms.log_prob, log_probs[:-1], rtol=1e-5, atol=1e-5)
    for i in range(2):
        params = jax.tree.map(lambda x: x[i], state.target_critic_params)  # noqa: B023
        x = jnp.concatenate([batch.observation[1:], actions[1:]], -1)
        q = critic.step(params, (), x, first[1:])[1]
        np.testing.assert_allclose(terms.next_q[i], q, rtol=1e-5, atol=1e-5)
    assert not np.allclose(terms.next_q[0], terms.next_q[1])  # two different critics
    soft = np.minimum(terms.next_q[0], terms.next_q[1]) - 0.7 * np.asarray(log_probs[1:])
    expected_target = np.asarray(batch.reward[1:]) + 0.9 * np.asarray(batch.discount[1:]) * soft
    np.testing.assert_allclose(terms.target, expected_target, rtol=1e-5, atol=1e-5)
    # Sequence 1 terminates at step 2: its target at t=1 is the reward alone.
    assert float(terms.target[1, 1]) == pytest.approx(float(batch.reward[2, 1]))
    # The online critics at the taken actions (scaled into [-1, 1]).
    taken = jnp.concatenate([batch.observation, batch.action / 2.0], -1)[:-1]
    online = np.stack(
        [
            critic.step(jax.tree.map(lambda x: x[i], state.critic_params), (), taken, first[:-1])[1]  # noqa: B023
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(terms.online_q, online, rtol=1e-5, atol=1e-6)
    per_step = 0.5 * ((online - np.asarray(terms.target)) ** 2).sum(axis=0)
    expected_loss = float(np.sum(per_step * mask) / mask.sum())
    _, metrics = agent.update(state, batch, key)
    assert float(metrics["loss/critic"]) == pytest.approx(expected_loss, rel=1e-5)
    entropy = float(np.sum(-np.asarray(log_probs[:-1]) * mask) / mask.sum())
    assert float(metrics["sac/entropy"]) == pytest.approx(entropy, rel=1e-5)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_whatever_the_restart_transition_holds_reaches_no_loss():
    agent, _, _ = _agent()
    state = agent.init(jax.random.PRNGKey(0))
    batch, key = _sequences(), jax.random.PRNGKey(1)
    _, metrics = agent.update(state, batch, key)
    # The action at LAST step 2 was never executed; FIRST step 3's reward and discount
    # belong to the reset.
    garbage = batch._replace(
        action=batch.action.at[2, 0].set(1.7),
        reward=batch.reward.at[3, 0].set(1e3),
        discount=batch.discount.at[3, 0].set(0.0),
    )
    _, garbage_metrics = agent.update(state, garbage, key)
    for name in ("loss/critic", "loss/policy", "loss/alpha"):
        assert float(garbage_metrics[name]) == pytest.approx(float(metrics[name]), rel=1e-6)
    inside = batch._replace(reward=batch.reward.at[3, 1].set(1e3))
    _, inside_metrics = agent.update(state, inside, key)
    assert float(inside_metrics["loss/critic"]) > 10 * float(metrics["loss/critic"])


def test_polyak_targets_on_schedule():
    agent, _, _ = _agent(tau=0.1, target_update_period=2, learning_rate=1e-2)
    state = agent.init(jax.random.PRNGKey(0))
    update = jax.jit(agent.update)
    old_target = state.target_critic_params
    state, _ = update(state, _sequences(), jax.random.PRNGKey(1))
    same = jax.tree.map(jnp.array_equal, old_target, state.target_critic_params)
    assert all(jax.tree.leaves(same))  # not due at the first update
    state, _ = update(state, _sequences(seed=1), jax.random.PRNGKey(2))
    expected = jax.tree.map(lambda o, t: 0.1 * o + 0.9 * t, state.critic_params, old_target)
    close = jax.tree.map(
        lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-7), state.target_critic_params, expected
    )
    assert all(jax.tree.leaves(close))
    assert not np.allclose(
        jax.tree.leaves(state.target_critic_params)[0], jax.tree.leaves(old_target)[0]
    )


def test_the_temperature_follows_the_target_entropy_or_stays_fixed():
    batch = _sequences()
    # The initial policy's entropy is about 1 nat: a target above it raises alpha, one far
    # below lowers it.
    for target_entropy, rises in ((5.0, True), (-10.0, False)):
        agent, _, _ = _agent(target_entropy=target_entropy, learning_rate=1e-2)
        state = agent.init(jax.random.PRNGKey(0))
        update = jax.jit(agent.update)
        for step in range(5):
            state, _ = update(state, batch, jax.random.PRNGKey(step))
        assert (float(state.log_alpha) > 0.0) == rises, target_entropy
    fixed, _, _ = _agent(learn_alpha=False, initial_alpha=0.2)
    state = fixed.init(jax.random.PRNGKey(0))
    assert state.alpha_opt_state == ()
    state, metrics = fixed.update(state, batch, jax.random.PRNGKey(0))
    assert float(jnp.exp(state.log_alpha)) == pytest.approx(0.2)
    assert float(metrics["sac/alpha"]) == pytest.approx(0.2)


def test_the_default_target_entropy_is_minus_the_action_dimension():
    assert sac.default_target_entropy(BOX) == -1.0
    assert sac.default_target_entropy(BOX2) == -2.0


# ----------------------------------------------------------------- recurrent


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_recurrent_unrolls_reset_at_first(core):
    agent, terms_of, _ = _agent(network=_recurrent(core))
    state = agent.init(jax.random.PRNGKey(0))
    batch, key = _sequences(), jax.random.PRNGKey(1)
    terms = terms_of(state, batch, key)
    # New observations before sequence 0's FIRST step 3 leave everything from step 3 on
    # unchanged; in sequence 1 (no FIRST) they change what follows.
    changed = batch._replace(observation=batch.observation.at[:3].add(1.0))
    changed_terms = terms_of(state, changed, key)
    np.testing.assert_allclose(
        changed_terms.online_q[:, 3:, 0], terms.online_q[:, 3:, 0], rtol=1e-6
    )
    np.testing.assert_allclose(changed_terms.next_q[:, 2:, 0], terms.next_q[:, 2:, 0], rtol=1e-6)
    assert not np.allclose(changed_terms.online_q[:, 3:, 1], terms.online_q[:, 3:, 1])
    assert not np.allclose(changed_terms.next_q[:, 2:, 1], terms.next_q[:, 2:, 1])
    _, metrics = agent.update(state, batch, key)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_recurrent_act_carries_both_networks_and_trains_from_the_rollout_state():
    agent, terms_of, _ = _agent(network=_recurrent("lstm"), use_rollout_state=True)
    state = agent.init(jax.random.PRNGKey(0))
    carry = agent.initial_carry(BATCH)
    assert set(carry) == {"policy", "critic"}
    # one state per twin critic, batch-major like every carry: the replay stores it [B, T, ...]
    assert carry["critic"][0].shape == (BATCH, 2, 8)
    timestep = TimeStep(
        jnp.full(BATCH, StepType.MID), jnp.zeros(BATCH), jnp.ones(BATCH), jnp.ones((BATCH, 3))
    )
    given = jax.tree.map(lambda x: x + 0.25, carry)  # a state to tell from zeros
    _, new_carry, extras = agent.act(state, timestep, given, jax.random.PRNGKey(1))
    assert jax.tree.structure(extras[ROLLOUT_STATE]) == jax.tree.structure(given)
    jax.tree.map(np.testing.assert_array_equal, extras[ROLLOUT_STATE], given)
    assert {x.shape[0] for x in jax.tree.leaves(extras)} == {BATCH}
    for name in carry:
        assert not np.allclose(new_carry[name][0], 0.0), name
    # Training starts from the recorded state of step 0 (not from zeros).
    stored = jax.tree.map(lambda x: jnp.broadcast_to(x, (LENGTH,) + x.shape), new_carry)
    zeros = jax.tree.map(jnp.zeros_like, stored)
    key = jax.random.PRNGKey(2)
    from_state = terms_of(state, _sequences(state=stored), key)
    from_zeros = terms_of(state, _sequences(state=zeros), key)
    assert not np.allclose(from_state.online_q[:, :, 1], from_zeros.online_q[:, :, 1])
    # Sequence 0 resets at step 3: from there on the stored start state does not matter.
    np.testing.assert_allclose(
        from_state.online_q[:, 3:, 0], from_zeros.online_q[:, 3:, 0], rtol=1e-6
    )


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sequence_length": 1}, "sac.sequence_length must be >= 2, got 1"),
        ({"discount": 1.2}, r"sac.discount must be in \[0, 1\], got 1.2"),
        ({"learning_rate": 0.0}, "sac.learning_rate must be > 0, got 0.0"),
        ({"learning_rate": "linear(1e-3, -1, 100)"}, "sac.learning_rate must be > 0"),
        ({"tau": 0.0}, r"sac.tau must be in \(0, 1\], got 0.0"),
        ({"tau": 1.5}, r"sac.tau must be in \(0, 1\], got 1.5"),
        ({"initial_alpha": 0.0}, "sac.initial_alpha must be > 0, got 0.0"),
        ({"target_entropy": "high"}, "sac.target_entropy must be a number"),
        ({"target_update_period": 0}, "sac.target_update_period must be >= 1, got 0"),
        ({"batch_size": 0}, "sac.batch_size must be >= 1, got 0"),
        ({"max_grad_norm": 0.0}, "sac.max_grad_norm must be > 0"),
        ({"replay": ReplayConfig(ratio=0.0)}, "sac.replay.ratio must be in \\(0, 1000\\], got 0.0"),
        (
            {"network": NetworkConfig(core="rnn")},
            "sac.network.core must be one of none, lstm, gru, got 'rnn'",
        ),
        ({"use_rollout_state": True}, "sac.use_rollout_state needs a recurrent core"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SACConfig(**overrides)


@pytest.mark.parametrize("spec", [DISCRETE, MULTI], ids=["Discrete", "MultiDiscrete"])
def test_discrete_actions_are_refused_naming_the_spaces_sac_serves(spec):
    with pytest.raises(ConfigError, match=r"sac needs continuous \(Box\) actions"):
        compiled.make("sac", spec, SACConfig())


# ----------------------------------------------------------------- the CLI


def test_sac_from_the_cli(tmp_path, capsys):
    """The contract's SAC given on the command line: every option reaches the run's config."""
    from contract_cases import CASES, RUN_FLAGS, flags

    from heron.cli import main

    run_dir = tmp_path / "run"
    argv = ["train", "sac", "--env", "gymnax:Pendulum-v1", "--preset", "none", "--steps", "256"]
    assert main([*argv, *RUN_FLAGS, *flags("sac"), "--run-dir", str(run_dir)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 256 and summary["final_eval_return"] is not None
    config = json.loads((run_dir / "config.json").read_text())
    assert config["sac"] == json.loads(json.dumps(dataclasses.asdict(CASES["sac"].config)))
    lines = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    trained = [line for line in lines if line["kind"] == "train" and line["train/updates"] > 0]
    assert trained and all(np.isfinite(line["sac/alpha"]) for line in trained)


@pytest.mark.parametrize(
    "flag, message",
    [
        (["--sac.tau", "0"], "sac.tau must be in (0, 1], got 0.0"),
        (["--sac.sequence-length", "1"], "sac.sequence_length must be >= 2, got 1"),
    ],
)
def test_bad_sac_flags_are_one_line_and_exit_2(flag, message, tmp_path, capsys):
    from heron.cli import main

    run_dir = tmp_path / "refused"
    argv = ["train", "sac", "--env", "gymnax:Pendulum-v1", "--run-dir", str(run_dir), *flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not run_dir.exists()


def test_sac_on_cartpole_is_refused_from_the_cli(capsys):
    from heron.cli import main

    assert main(["train", "sac", "--env", "gymnax:CartPole-v1", "--steps", "64"]) == 2
    err = capsys.readouterr().err
    assert "sac needs continuous (Box) actions" in err and "Traceback" not in err


# ----------------------------------------------------------------- learning (slow)


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [(e["step"], round(e["return_mean"], 1)) for e in lines if e["kind"] == "eval"]


@pytest.mark.slow
def test_sac_learns_pendulum_from_its_preset(tmp_path):
    """SAC on gymnax Pendulum-v1 with the shipped preset (heron/presets/sac.toml), as
    ``heron train sac --env gymnax:Pendulum-v1`` runs it: greedy >= -200 within 20k env
    steps (figures for seeds 0-2 in the preset's comment)."""
    from heron import presets
    from heron.api import build, train

    config, run = presets.preset("sac", "gymnax:Pendulum-v1")
    run = dataclasses.replace(run, stop_at_return=-200.0)  # ends when it gets there
    summary = train(build("sac", config, run), str(tmp_path / "run"))
    assert summary["steps"] <= 20_000 + run.num_envs
    assert summary["best_eval_return"] >= -200, _greedy_evals(tmp_path / "run")
