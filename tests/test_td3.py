"""TD3: the clipped double-Q target with target policy smoothing against a plain Python
loop, restart masking, the delayed policy and target updates, exploration noise when
collecting and at evaluation temperatures, recurrent resets, bad input, and (slow) learning
on Pendulum from its preset."""

import dataclasses
import json

import compiled
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron import agents
from heron.agents import ConfigError, td3
from heron.agents.base import ReplayConfig
from heron.agents.td3 import TD3Config
from heron.networks import NetworkConfig
from heron.specs import EnvSpec, action_spec_from_space
from heron.types import Experience, StepType, TimeStep

BOX = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Box(-2.0, 2.0, (1,))))
DISCRETE = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))
MULTI = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.MultiDiscrete([3, 3])))
SMALL = dict(network=NetworkConfig(hidden_sizes=(16, 16), activation="relu"), sequence_length=5)
LENGTH, BATCH = 5, 6
# The unit tests' agent: Polyak steps large enough to see, Adam steps large enough to move.
CONFIG = TD3Config(**SMALL, tau=0.1, learning_rate=1e-2)


def _sequences(length=LENGTH, batch=BATCH, seed=0):
    """Sequences [S, B] as the driver hands them to ``update``: sequence 0 ends an episode at
    step 2 (LAST, truncated: discount 1) and starts the next at step 3 (FIRST); sequence 1
    terminates at step 2 (discount 0)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    step_type = (
        jnp.full((length, batch), StepType.MID, jnp.int32)
        .at[2, 0]
        .set(StepType.LAST)
        .at[3, 0]
        .set(StepType.FIRST)
    )
    return Experience(
        step_type=step_type,
        reward=jax.random.normal(keys[0], (length, batch)).at[3, 0].set(0.0),
        discount=jnp.ones((length, batch)).at[2, 1].set(0.0),
        observation=jax.random.normal(keys[1], (length, batch, 3)),
        action=jax.random.uniform(keys[2], (length, batch, 1), minval=-1.9, maxval=1.9),
    )


@pytest.fixture(scope="module")
def agent():
    return compiled.make("td3", BOX, CONFIG)


def _changed(a, b) -> bool:
    return not all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))


def _targets_of(config):
    """``td3.targets`` at the config's discount, compiled once per config."""
    networks = td3.networks(BOX, config)

    @jax.jit
    def targets(state, batch, key):
        inputs = td3.inputs_of(networks, config, batch)
        target, next_q = td3.targets(networks, config, state, inputs, key, config.discount)
        return target, next_q, inputs.mask

    return networks, targets


# ----------------------------------------------------------------- the target


def test_the_target_is_a_python_loop_over_smoothed_actions_and_the_smaller_critic():
    """y_t = r_{t+1} + gamma d_{t+1} min_i Q'_i(s_{t+1}, clip(pi'(s_{t+1}) + clip(eps, -c, c),
    -1, 1)), each sequence's noise eps ~ N(0, sigma^2) [T, d] drawn from fold_in(key, b)."""
    sigma, c, gamma = 0.6, 0.3, 0.9
    config = TD3Config(**SMALL, target_policy_noise=sigma, target_noise_clip=c, discount=gamma)
    networks, targets = _targets_of(config)
    state = agents.make("td3", BOX, config).init(jax.random.PRNGKey(0))
    # Targets unlike the online networks, the target policy's actions near the bound 1 (so
    # that clipping into [-1, 1] acts), and critics far enough apart to tell which is smaller.
    policy = state.target_policy_params
    head = policy["params"]["head"]["Dense_0"]
    policy = {
        "params": {**policy["params"], "head": {"Dense_0": {**head, "bias": head["bias"] + 1.2}}}
    }
    critics = jax.tree.map(lambda x: x + 0.05, state.target_critic_params)
    state = state._replace(target_policy_params=policy, target_critic_params=critics)
    batch, key = _sequences(), jax.random.PRNGKey(7)
    target, next_q, mask = targets(state, batch, key)

    obs, first = np.asarray(batch.observation), np.asarray(batch.step_type == StepType.FIRST)
    expected, q_min_from = np.zeros((LENGTH - 1, BATCH)), np.zeros((2, LENGTH - 1, BATCH))
    noise_clipped = action_clipped = untouched = 0
    for b in range(BATCH):
        eps = sigma * np.asarray(jax.random.normal(jax.random.fold_in(key, b), (LENGTH - 1, 1)))
        for t in range(LENGTH - 1):
            s, f = obs[t + 1, b][None], first[t + 1, b][None]
            pre_tanh = networks.policy.step(policy, (), s, f)[1][0]
            clipped_eps = np.clip(eps[t], -c, c)
            raw = np.tanh(np.asarray(pre_tanh)) + clipped_eps
            action = np.clip(raw, -1.0, 1.0)
            noise_clipped += int(abs(eps[t, 0]) > c)
            action_clipped += int(abs(raw[0]) > 1.0)
            untouched += int(abs(eps[t, 0]) <= c and abs(raw[0]) <= 1.0)
            for i in range(2):
                params = jax.tree.map(lambda x: x[i], critics)  # noqa: B023
                x = np.concatenate([s, action[None]], axis=-1)
                q_min_from[i, t, b] = float(networks.critics.network.step(params, (), x, f)[1][0])
            bootstrap = gamma * float(batch.discount[t + 1, b]) * q_min_from[:, t, b].min()
            expected[t, b] = float(batch.reward[t + 1, b]) + bootstrap
    assert noise_clipped and action_clipped and untouched  # every branch of both clips ran
    assert not np.allclose(q_min_from[0], q_min_from[1])
    np.testing.assert_allclose(next_q, q_min_from, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-6)
    # Sequence 1 terminates at step 2: the target at t=1 is the reward alone. Sequence 0 is
    # truncated there: it bootstraps from the LAST step's own observation.
    assert float(target[1, 1]) == pytest.approx(float(batch.reward[2, 1]))
    assert abs(float(target[1, 0]) - float(batch.reward[2, 0])) > 1e-3
    # The transition out of LAST step 2 into FIRST step 3 (the reset) is masked out.
    restart = np.ones((LENGTH - 1, BATCH))
    restart[2, 0] = 0.0
    np.testing.assert_array_equal(mask, restart)


def test_noise_of_std_zero_leaves_actions_and_wide_noise_lands_on_its_clip():
    actions = jnp.array([0.3, -0.99])
    noiseless = td3.with_noise(actions, jax.random.PRNGKey(0), 0.0, 0.5)
    np.testing.assert_array_equal(noiseless, actions)
    wide = td3.smoothed(jnp.full((4, 3, 1), 0.5), jax.random.PRNGKey(1), 1e3, 0.2)  # [T, B, d]
    np.testing.assert_allclose(jnp.abs(wide - 0.5), 0.2, rtol=1e-5)
    assert {round(float(x), 4) for x in wide.ravel()} == {0.3, 0.7}


# ----------------------------------------------------------------- the update


def test_whatever_the_restart_transition_holds_reaches_no_loss(agent):
    # After one update: this is the second, which steps the policy too (policy_delay 2).
    state = agent.init(jax.random.PRNGKey(0))._replace(update_step=jnp.ones((), jnp.int32))
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
    for name in ("loss/critic", "loss/policy"):
        assert float(garbage_metrics[name]) == pytest.approx(float(metrics[name]), rel=1e-6)
    inside = batch._replace(reward=batch.reward.at[3, 1].set(1e3))
    _, inside_metrics = agent.update(state, inside, key)
    assert float(inside_metrics["loss/critic"]) > 10 * float(metrics["loss/critic"])
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_the_policy_and_the_targets_move_at_every_policy_delay_th_update_only(agent):
    """policy_delay 2: the critics step at updates 1-4, the policy (and its Adam moments) and
    both targets at updates 2 and 4 only, the targets by tau towards the new online ones."""
    state = agent.init(jax.random.PRNGKey(0))
    networks = td3.networks(BOX, CONFIG)
    for k in range(1, 5):
        batch = _sequences(seed=k)
        new, metrics = agent.update(state, batch, jax.random.PRNGKey(k))
        due = k % 2 == 0
        # The policy's loss is computed at the delayed updates only, and counted twice
        # there: its mean over whole periods is its mean where it is computed.
        # Against the critics this update stepped (as SB3's TD3).
        stepped = state._replace(critic_params=new.critic_params)
        loss, _ = td3.policy_loss(
            state.policy_params, networks, stepped, td3.inputs_of(networks, CONFIG, batch)
        )
        assert float(metrics["loss/policy"]) == pytest.approx(2 * float(loss) if due else 0.0)
        assert _changed(new.critic_params, state.critic_params), k
        assert _changed(new.critic_opt_state, state.critic_opt_state), k
        assert _changed(new.policy_params, state.policy_params) == due, k
        assert _changed(new.policy_opt_state, state.policy_opt_state) == due, k
        assert _changed(new.target_policy_params, state.target_policy_params) == due, k
        assert _changed(new.target_critic_params, state.target_critic_params) == due, k
        if due:
            for online, old, moved in (
                (new.policy_params, state.target_policy_params, new.target_policy_params),
                (new.critic_params, state.target_critic_params, new.target_critic_params),
            ):
                expected = jax.tree.map(lambda o, t: 0.1 * o + 0.9 * t, online, old)
                close = jax.tree.map(
                    lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-7), moved, expected
                )
                assert all(jax.tree.leaves(close)), k
        state = new
    assert int(state.update_step) == 4


# ----------------------------------------------------------------- acting


def test_collecting_adds_exploration_noise_and_temperature_scales_it(agent):
    """In [-1, 1]: act adds noise of std exploration_noise (0.1) once the agent has learnt
    (before its first update it acts uniformly at random), policy at temperature T of std
    T * 0.1, and T = 0 is the deterministic tanh action; all scaled to the Box."""
    fresh = agent.init(jax.random.PRNGKey(0))
    state = fresh._replace(update_step=jnp.ones((), jnp.int32))
    n = 4096
    observation = jax.random.normal(jax.random.PRNGKey(1), (n, 3))
    timestep = TimeStep(jnp.full(n, StepType.MID), jnp.zeros(n), jnp.ones(n), observation)
    carry = agent.initial_carry(n)
    greedy, _ = agent.policy(state, timestep, carry, jax.random.PRNGKey(2), 0.0)
    policy = td3.networks(BOX, CONFIG).policy
    head = policy.step(state.policy_params, (), observation, timestep.is_first())[1]
    np.testing.assert_allclose(greedy / 2.0, np.tanh(head), atol=1e-6)
    acted, new_carry, extras = agent.act(state, timestep, carry, jax.random.PRNGKey(3))
    assert extras == {} and jax.tree.leaves(new_carry) == []
    noise = np.asarray(acted - greedy) / 2.0  # back in [-1, 1]: the initial actions are ~0
    assert float(np.mean(noise)) == pytest.approx(0.0, abs=0.01)
    assert float(np.std(noise)) == pytest.approx(0.1, rel=0.05)
    for temperature in (0.5, 3.0):
        sampled, _ = agent.policy(state, timestep, carry, jax.random.PRNGKey(4), temperature)
        spread = float(np.std(np.asarray(sampled - greedy) / 2.0))
        assert spread == pytest.approx(0.1 * temperature, rel=0.05), temperature
    assert float(jnp.abs(sampled).max()) <= 2.0
    warm_up, _, _ = agent.act(fresh, timestep, carry, jax.random.PRNGKey(3))
    uniform = np.asarray(warm_up) / 2.0  # U(-1, 1): mean 0, std 1/sqrt(3), reaching the edges
    assert float(np.mean(uniform)) == pytest.approx(0.0, abs=0.03)
    assert float(np.std(uniform)) == pytest.approx(1 / np.sqrt(3), rel=0.03)
    assert float(np.abs(uniform).max()) > 0.99 and float(np.abs(uniform).max()) <= 1.0


# ----------------------------------------------------------------- recurrent


def test_recurrent_targets_reset_at_first():
    network = dataclasses.replace(SMALL["network"], core="lstm", core_size=8)
    config = TD3Config(**{**SMALL, "network": network})
    _, targets = _targets_of(config)
    state = agents.make("td3", BOX, config).init(jax.random.PRNGKey(0))
    batch, key = _sequences(), jax.random.PRNGKey(1)
    target, next_q, _ = targets(state, batch, key)
    # New observations before sequence 0's FIRST step 3 leave its targets from t = 2 (which
    # read steps >= 3) unchanged; sequence 1 (no FIRST) remembers them.
    changed = batch._replace(observation=batch.observation.at[:3].add(1.0))
    changed_target, changed_q, _ = targets(state, changed, key)
    np.testing.assert_allclose(changed_q[:, 2:, 0], next_q[:, 2:, 0], rtol=1e-6)
    np.testing.assert_allclose(changed_target[2:, 0], target[2:, 0], rtol=1e-6)
    assert not np.allclose(changed_q[:, 2:, 1], next_q[:, 2:, 1])


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"policy_delay": 0}, "td3.policy_delay must be >= 1, got 0"),
        ({"tau": 0.0}, r"td3.tau must be in \(0, 1\], got 0.0"),
        ({"target_policy_noise": -0.1}, "td3.target_policy_noise must be >= 0, got -0.1"),
        ({"target_noise_clip": -1.0}, "td3.target_noise_clip must be >= 0, got -1.0"),
        ({"exploration_noise": -0.1}, "td3.exploration_noise must be >= 0, got -0.1"),
        ({"sequence_length": 1}, "td3.sequence_length must be >= 2, got 1"),
        ({"replay": ReplayConfig(ratio=0.0)}, r"td3.replay.ratio must be in \(0, 1000\]"),
        ({"use_rollout_state": True}, "td3.use_rollout_state needs a recurrent core"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        TD3Config(**overrides)


@pytest.mark.parametrize("spec", [DISCRETE, MULTI], ids=["Discrete", "MultiDiscrete"])
def test_discrete_actions_are_refused_naming_the_spaces_td3_serves(spec):
    with pytest.raises(ConfigError, match=r"td3 needs continuous \(Box\) actions"):
        agents.make("td3", spec, TD3Config())


def test_exploration_noise_is_refused_when_nothing_is_collected():
    with pytest.raises(ConfigError, match="td3.exploration_noise=0.2 is the noise of the policy"):
        agents.make("td3", BOX, TD3Config(exploration_noise=0.2), collects=False)
    assert agents.make("td3", BOX, TD3Config(), collects=False).name == "td3"


def test_bad_td3_flags_are_one_line_and_exit_2(tmp_path, capsys):
    from heron.cli import main

    run_dir = tmp_path / "refused"
    argv = ["train", "td3", "--env", "gymnax:Pendulum-v1", "--run-dir", str(run_dir)]
    assert main([*argv, "--td3.policy-delay", "0"]) == 2
    err = capsys.readouterr().err
    assert "td3.policy_delay must be >= 1, got 0" in err and "Traceback" not in err
    assert not run_dir.exists()


# ----------------------------------------------------------------- learning (slow)


def _greedy_evals(run_dir):
    lines = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    return [(e["step"], round(e["return_mean"], 1)) for e in lines if e["kind"] == "eval"]


@pytest.mark.slow
def test_td3_learns_pendulum_from_its_preset(tmp_path):
    """TD3 on gymnax Pendulum-v1 with the shipped preset (heron/presets/td3.toml), as
    ``heron train td3 --env gymnax:Pendulum-v1`` runs it: greedy >= -200 within 20k env
    steps (figures for seeds 0-2 in the preset's comment)."""
    from heron import presets
    from heron.api import build, train

    config, run = presets.preset("td3", "gymnax:Pendulum-v1")
    run = dataclasses.replace(run, stop_at_return=-200.0)  # ends when it gets there
    summary = train(build("td3", config, run), str(tmp_path / "run"))
    assert summary["steps"] <= 20_000 + run.num_envs
    assert summary["best_eval_return"] >= -200, _greedy_evals(tmp_path / "run")
