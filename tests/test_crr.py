"""CRR: policy-improvement modes and baselines, targets, Boltzmann resampling, bad input."""

import dataclasses
import json

import compiled
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build
from scipy import stats

from heron import api
from heron.agents import ConfigError, CRRConfig, NetworkConfig, boltzmann, crr
from heron.agents.base import ReplayConfig
from heron.specs import EnvSpec, action_spec_from_space
from heron.training import RunConfig
from heron.types import Experience, StepType, TimeStep

BOX = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Box(-2.0, 2.0, (1,))))
DISCRETE = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))
MULTI = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.MultiDiscrete([3, 3])))
SMALL = dict(
    network=dataclasses.replace(crr.acme_network(), hidden_sizes=(32, 32)),
    num_atoms=11,
    vmin=-10.0,
    vmax=10.0,
)


def _sequences(spec, length=3, batch=8, seed=0):
    """Sequences [L, M] as the learner hands them to ``update``; step 1 of env 0 is LAST."""
    key = jax.random.PRNGKey(seed)
    step_type = jnp.full((length, batch), StepType.MID, jnp.int32).at[1, 0].set(StepType.LAST)
    if spec.action.is_discrete:
        shape = (length, batch) + spec.action.action_shape
        action = jax.random.randint(key, shape, 0, spec.action.n_actions)
    else:
        action = jax.random.uniform(key, (length, batch, 1), minval=-2.0, maxval=2.0)
    return Experience(
        step_type=step_type,
        reward=jax.random.normal(key, (length, batch)),
        discount=jnp.ones((length, batch)),
        observation=jax.random.normal(
            jax.random.fold_in(key, 1), (length, batch) + spec.observation_shape
        ),
        action=action,
    )


def _timestep(batch, obs_shape, seed=0):
    observation = jax.random.normal(jax.random.PRNGKey(seed), (batch,) + obs_shape)
    return TimeStep(jnp.ones(batch, jnp.int32), jnp.zeros(batch), jnp.ones(batch), observation)


def _with_varied_critic(state, seed=7):
    """The critic's head (zeros at init, so Q = 0 everywhere) given random weights: Q
    differs between actions and states."""

    def perturb(path, x):
        names = [getattr(p, "key", "") for p in path]
        if "head" in names:
            return jax.random.normal(jax.random.PRNGKey(seed), x.shape) * 0.5
        return x

    critic = jax.tree_util.tree_map_with_path(perturb, state.critic_params)
    return state._replace(critic_params=critic, target_critic_params=critic)


@pytest.mark.parametrize("mode", ["exp", "binary", "all"])
def test_update_in_every_mode(mode):
    config = CRRConfig(policy_improvement_mode=mode, **SMALL)
    agent = compiled.make("crr", BOX, config)
    state = _with_varied_critic(agent.init(jax.random.PRNGKey(0)))
    new_state, metrics = agent.update(state, _sequences(BOX), jax.random.PRNGKey(1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert int(new_state.update_step) == 1
    coefficient = float(metrics["crr/coefficient"])
    if mode == "all":
        assert coefficient == 1.0
    elif mode == "binary":
        assert 0.0 < coefficient < 1.0  # a varied critic: some advantages are positive
    else:
        assert 0.0 < coefficient <= config.ratio_upper_bound and coefficient != 1.0


def test_baselines_are_the_mean_max_and_min_over_policy_samples():
    """Same state, batch and samples: the advantage against the max baseline is the
    smallest and against the min baseline the largest (swapping max and min fails this)."""
    advantages = {}
    for baseline in ("mean", "max", "min"):
        agent = compiled.make("crr", BOX, CRRConfig(baseline_reduce=baseline, **SMALL))
        state = _with_varied_critic(agent.init(jax.random.PRNGKey(0)))
        _, metrics = agent.update(state, _sequences(BOX), jax.random.PRNGKey(1))
        advantages[baseline] = float(metrics["crr/advantage"])
    assert advantages["max"] < advantages["mean"] < advantages["min"]
    assert advantages["min"] - advantages["max"] > 0.05


def test_coefficients():
    advantage = jnp.array([-2.0, 0.0, 0.5, 10.0])
    np.testing.assert_allclose(
        crr.exp_coefficient(advantage, 0.5, 20.0), [np.exp(-4.0), 1.0, np.e, 20.0], rtol=1e-6
    )
    np.testing.assert_array_equal(crr.binary_coefficient(advantage, 1.0, 20.0), [0, 0, 1, 1])
    np.testing.assert_array_equal(crr.all_coefficient(advantage, 1.0, 20.0), [1, 1, 1, 1])


def test_critic_learns_a_fixed_batch_and_targets_copy_on_acmes_schedule():
    """Acme's recurrent CRR copies after the update its counter reads 0 mod P on: updates 1,
    P + 1, 2P + 1, ..."""
    config = CRRConfig(target_update_period=5, learning_rate=1e-3, **SMALL)
    agent = compiled.make("crr", BOX, config)
    state = agent.init(jax.random.PRNGKey(0))
    batch = _sequences(BOX)
    losses, copied = [], []
    update = jax.jit(agent.update)
    for step in range(7):
        before = state.target_critic_params
        state, metrics = update(state, batch, jax.random.PRNGKey(step))
        losses.append(float(metrics["loss/critic"]))
        equal = jax.tree.map(jnp.array_equal, state.target_critic_params, state.critic_params)
        kept = jax.tree.map(jnp.array_equal, state.target_critic_params, before)
        copied.append(all(jax.tree.leaves(equal)))
        assert copied[-1] != all(jax.tree.leaves(kept))  # a copy, or the old target kept
    assert copied == [True, False, False, False, False, True, False]
    assert losses[-1] < losses[0]


def test_losses_are_divided_by_the_sequence_length_as_in_acme():
    """Acme sums the L - 1 transitions' batch means and divides by L: the same transitions
    cut into sequences of 3 steps weigh (2/3) / (1/2) = 4/3 of their weight in sequences of
    2 (policy loss of behaviour cloning, ``all``: no sampling in its value)."""
    config = CRRConfig(policy_improvement_mode="all", **SMALL)
    agent = compiled.make("crr", BOX, config)
    state = agent.init(jax.random.PRNGKey(0))
    threes = _sequences(BOX, length=3, batch=8)
    twos = jax.tree.map(lambda x: jnp.concatenate([x[:2], x[1:]], axis=1), threes)  # [2, 16]
    key = jax.random.PRNGKey(1)
    loss_three = float(agent.update(state, threes, key)[1]["loss/policy"])
    loss_two = float(agent.update(state, twos, key)[1]["loss/policy"])
    assert loss_three / loss_two == pytest.approx(4 / 3, rel=1e-5)


@pytest.mark.parametrize("spec, shape", [(DISCRETE, (5,)), (MULTI, (5, 2))])
def test_discrete_and_multi_discrete_actions(spec, shape):
    agent = compiled.make("crr", spec, CRRConfig(**SMALL))
    state = agent.init(jax.random.PRNGKey(0))
    action, _, _ = agent.act(state, _timestep(5, (4,)), agent.initial_carry(5), jax.random.key(0))
    assert action.shape == shape and action.dtype == jnp.int32
    _, metrics = agent.update(state, _sequences(spec), jax.random.PRNGKey(1))
    assert np.isfinite(float(metrics["loss/policy"]))


def test_multi_discrete_controls_each_get_their_own_log_prob():
    """A MultiDiscrete policy is a product of one categorical per control."""
    agent = compiled.make("crr", MULTI, CRRConfig(**SMALL))
    state = agent.init(jax.random.PRNGKey(0))
    batch = _sequences(MULTI)
    _, metrics = agent.update(state, batch, jax.random.PRNGKey(1))
    # At init the policy is uniform over 3 x 3 joint actions; behaviour cloning's loss (mode
    # all, coefficient 1) is -log(1/9) per transition, times (L - 1) / L as in Acme.
    bc = compiled.make("crr", MULTI, CRRConfig(policy_improvement_mode="all", **SMALL))
    _, bc_metrics = bc.update(bc.init(jax.random.PRNGKey(0)), batch, jax.random.PRNGKey(1))
    length = batch.step_type.shape[0]
    expected = np.log(9.0) * (length - 1) / length
    assert float(bc_metrics["loss/policy"]) == pytest.approx(expected, rel=1e-3)


def test_actions_land_in_the_box_and_greedy_is_deterministic():
    timestep = _timestep(64, (3,))
    for acting in ("policy", "boltzmann"):
        agent = compiled.make("crr", BOX, CRRConfig(acting=acting, **SMALL))
        state = agent.init(jax.random.PRNGKey(0))
        carry = agent.initial_carry(64)
        action, _, _ = agent.act(state, timestep, carry, jax.random.PRNGKey(1))
        assert action.shape == (64, 1)
        assert float(action.min()) >= -2.0 and float(action.max()) <= 2.0
        greedy, _ = agent.policy(state, timestep, carry, jax.random.PRNGKey(2), 0.0)
        again, _ = agent.policy(state, timestep, carry, jax.random.PRNGKey(3), 0.0)
        np.testing.assert_array_equal(greedy, again)


def _critic_preferring_action_one(state, num_atoms):
    """A critic (mlp torso of 8 tanh units) whose Q is the top atom for action 1 and the
    middle of the support for action 0, whatever the observation."""
    params = jax.tree.map(jnp.zeros_like, state.critic_params)
    inner = params["params"]
    kernel = inner["Torso_0"]["Dense_0"]["kernel"]  # [obs 4 + one-hot 2, 8]
    inner["Torso_0"]["Dense_0"]["kernel"] = kernel.at[-1].set(3.0)  # action 1 lights up
    head = inner["head"]["Dense_0"]["kernel"]  # [8, atoms]
    inner["head"]["Dense_0"]["kernel"] = head.at[:, num_atoms - 1].set(5.0)
    return state._replace(critic_params=params)


def test_boltzmann_acting_prefers_the_action_the_critic_prefers():
    network = NetworkConfig(hidden_sizes=(8,), torso="mlp", activation="tanh")
    settings = dict(network=network, num_atoms=11, vmin=-10.0, vmax=10.0)
    timestep = _timestep(4000, (4,))
    fractions = {}
    for acting in ("policy", "boltzmann"):
        config = CRRConfig(acting=acting, boltzmann_beta=0.5, boltzmann_samples=8, **settings)
        agent = compiled.make("crr", DISCRETE, config)
        state = _critic_preferring_action_one(agent.init(jax.random.PRNGKey(0)), 11)
        action, _, _ = agent.act(state, timestep, agent.initial_carry(4000), jax.random.key(1))
        fractions[acting] = float(jnp.mean(action == 1))
    # The policy is uniform at init; Boltzmann resampling picks action 1 whenever one of the
    # 8 candidates is action 1 (Q about 10 against 0 at beta 0.5): 1 - 0.5 ** 8 of the time.
    assert fractions["policy"] == pytest.approx(0.5, abs=0.05)
    assert fractions["boltzmann"] == pytest.approx(1 - 0.5**8, abs=0.01)


def test_boltzmann_frequencies_match_softmax():
    q = jnp.array([[0.0], [1.0], [2.0], [-1.0]])  # [N=4, B=1]
    beta = 0.7
    actions = jnp.arange(4.0)[:, None, None]  # candidate i is the action i
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    chosen = jax.vmap(lambda k: boltzmann.resample(k, actions, q, beta)[1][0])(keys)
    counts = np.bincount(np.asarray(chosen), minlength=4)
    expected = np.asarray(boltzmann.boltzmann_probabilities(q, beta))[:, 0] * len(keys)
    assert stats.chisquare(counts, expected).pvalue > 0.001
    picked, index = boltzmann.resample(keys[0], actions, q, beta)
    assert float(picked[0, 0]) == float(index[0])


def test_recurrent_boltzmann_returns_the_chosen_samples_states():
    q = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    actions = jax.random.normal(jax.random.PRNGKey(1), (5, 3, 2))
    states = {
        "policy": jnp.arange(15.0).reshape(5, 3, 1),
        "critic": (jnp.arange(15).reshape(5, 3) * 10),
    }
    action, state, index = boltzmann.resample_with_states(
        jax.random.PRNGKey(2), actions, q, 0.5, states
    )
    for b in range(3):
        i = int(index[b])
        np.testing.assert_array_equal(action[b], actions[i, b])
        assert float(state["policy"][b, 0]) == float(states["policy"][i, b, 0])
        assert int(state["critic"][b]) == int(states["critic"][i, b])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"vmin": 5.0, "vmax": 5.0}, "crr.vmin must be < crr.vmax"),
        ({"num_atoms": 1}, "crr.num_atoms must be >= 2, got 1"),
        ({"policy_improvement_mode": "softmax"}, "must be one of exp, binary, all"),
        ({"baseline_reduce": "median"}, "must be one of mean, max, min"),
        ({"sequence_length": 1}, "crr.sequence_length must be >= 2"),
        ({"discount": 1.5}, r"crr.discount must be in \[0, 1\]"),
        ({"acting": "greedy"}, "crr.acting must be one of policy, boltzmann"),
        ({"replay": ReplayConfig(capacity=0)}, "crr.replay.capacity must be >= 1, got 0"),
        ({"replay": ReplayConfig(ratio=0.0)}, "crr.replay.ratio must be in \\(0, 1000\\]"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        CRRConfig(**overrides)


def _small_crr_run(**overrides):
    """Pendulum's rewards scaled into the small critic's support [-10, 10]."""
    settings = dict(
        env="gymnax:Pendulum-v1",
        steps=512,
        num_envs=4,
        reward_scale=0.1,
        eval_every_n=64,
        n_evals=2,
        eval_temperatures=(0.0,),
        save_every_n=32,
        done_frac_for_policy_save=0.0,
    )
    settings.update(overrides)
    return RunConfig(**settings)


SMALL_CRR = CRRConfig(
    batch_size=16,
    replay=ReplayConfig(min_size=64, ratio=0.5),
    unroll_length=2,
    **SMALL,
)


def test_off_policy_updates_follow_the_replay_ratio_once_min_size_is_stored(tmp_path):
    summary = api.train(build("crr", SMALL_CRR, _small_crr_run()), str(tmp_path / "run"))
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    updates = [(x["iteration"], x["train/updates"]) for x in lines if x["kind"] == "train"]
    # The first step of every env enters at the start (4), then 8 steps per iteration:
    # 68 >= 64 stored at step 64 (iteration 8), and from then on 0.5 x 8 updates per
    # iteration. Each line sums the iterations since the one before.
    previous = 0
    for iteration, made in updates:
        assert made == 4.0 * sum(8 * i >= 64 for i in range(previous + 1, iteration + 1))
        previous = iteration
    assert previous == 64 and sum(made for _, made in updates) == 4.0 * 57
    assert summary["steps"] == 512 and summary["final_eval_return"] is not None


def test_a_fractional_replay_ratio_is_honoured_over_iterations(tmp_path):
    config = dataclasses.replace(SMALL_CRR, replay=ReplayConfig(min_size=16, ratio=0.05))
    api.train(build("crr", config, _small_crr_run(steps=800)), str(tmp_path / "run"))
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    updates = sum(line["train/updates"] for line in lines if line["kind"] == "train")
    # 0.05 updates per step: 0.4 per iteration of 8 steps, from the 2nd iteration on (20 >= 16)
    assert updates == int(0.05 * 8 * 99)


def test_targets_clipped_to_the_support_are_warned_about(tmp_path, capsys):
    """Pendulum's unscaled rewards (down to -16 a step) against a support of [-1, 1]: most
    target mass is clipped, and the run says so once, with what to change."""
    config = dataclasses.replace(SMALL_CRR, vmin=-1.0, vmax=1.0)
    run = _small_crr_run(steps=160, reward_scale=1.0)
    api.train(build("crr", config, run), str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert err.count("of the critic's target mass falls outside its support [-1, 1]") == 1
    assert "--reward-scale" in err
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    trained = [x for x in lines if x["kind"] == "train" and x["train/updates"] > 0]
    assert trained and all(x["crr/clipped_fraction"] > 0.5 for x in trained)
    notes = [x for x in lines if x["kind"] == "note"]
    assert len(notes) == 1 and "clipped" in notes[0]["message"]
    capsys.readouterr()
    api.train(build("crr", SMALL_CRR, _small_crr_run(steps=160)), str(tmp_path / "ok"))
    assert "falls outside its support" not in capsys.readouterr().err
