"""CRR: policy-improvement modes and baselines, targets, Boltzmann resampling, bad input."""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from heron import agents
from heron.agents import ConfigError, CRRConfig, boltzmann, crr
from heron.specs import EnvSpec, action_spec_from_space
from heron.types import Experience, StepType

BOX = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Box(-2.0, 2.0, (1,))))
DISCRETE = EnvSpec((4,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))
SMALL = dict(hidden_sizes=(32, 32), num_atoms=11, vmin=-10.0, vmax=10.0)


def _sequences(spec, length=3, batch=8, seed=0):
    """Sequences [L, M] as the driver hands them to ``update``; step 1 of env 0 is LAST."""
    key = jax.random.PRNGKey(seed)
    step_type = jnp.full((length, batch), StepType.MID, jnp.int32).at[1, 0].set(StepType.LAST)
    if spec.action.is_discrete:
        action = jax.random.randint(key, (length, batch), 0, spec.action.n_actions)
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


@pytest.mark.parametrize("mode", ["exp", "binary", "all"])
@pytest.mark.parametrize("baseline", ["mean", "max", "min"])
def test_update_in_every_mode_and_baseline(mode, baseline):
    config = CRRConfig(policy_improvement_mode=mode, baseline_reduce=baseline, **SMALL)
    agent = agents.make("crr", BOX, config)
    state = agent.init(jax.random.PRNGKey(0))
    batch = _sequences(BOX)
    new_state, metrics = agent.update(state, batch, jax.random.PRNGKey(1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert int(new_state.update_step) == 1
    coefficient = float(metrics["crr/coefficient"])
    if mode == "all":
        assert coefficient == 1.0
    elif mode == "binary":
        assert 0.0 <= coefficient <= 1.0
    else:
        assert 0.0 < coefficient <= config.ratio_upper_bound
    if baseline == "max":
        assert float(metrics["crr/advantage"]) <= 1e-6  # Q(s, a) - max over samples
    if baseline == "min":
        assert float(metrics["crr/advantage"]) >= -1e-6


def test_coefficients():
    advantage = jnp.array([-2.0, 0.0, 0.5, 10.0])
    np.testing.assert_allclose(
        crr.exp_coefficient(advantage, 0.5, 20.0), [np.exp(-4.0), 1.0, np.e, 20.0], rtol=1e-6
    )
    np.testing.assert_array_equal(crr.binary_coefficient(advantage, 1.0, 20.0), [0, 0, 1, 1])
    np.testing.assert_array_equal(crr.all_coefficient(advantage, 1.0, 20.0), [1, 1, 1, 1])


def test_critic_learns_a_fixed_batch_and_targets_copy_on_schedule():
    config = CRRConfig(target_update_period=5, learning_rate=1e-3, **SMALL)
    agent = agents.make("crr", BOX, config)
    state = agent.init(jax.random.PRNGKey(0))
    initial_target = state.target_critic_params
    batch = _sequences(BOX)
    losses = []
    for step in range(5):
        state, metrics = agent.update(state, batch, jax.random.PRNGKey(step))
        losses.append(float(metrics["loss/critic"]))
        same = jax.tree.leaves(
            jax.tree.map(jnp.array_equal, state.target_critic_params, initial_target)
        )
        assert all(same) == (step < 4)  # copied at the 5th update, not before
    assert jax.tree.all(
        jax.tree.map(jnp.array_equal, state.target_critic_params, state.critic_params)
    )
    assert losses[-1] < losses[0]


def test_discrete_actions():
    agent = agents.make("crr", DISCRETE, CRRConfig(**SMALL))
    state = agent.init(jax.random.PRNGKey(0))
    from heron.types import TimeStep

    timestep = TimeStep(jnp.ones(5, jnp.int32), jnp.zeros(5), jnp.ones(5), jnp.zeros((5, 4)))
    action, _, _ = agent.act(state, timestep, (), jax.random.PRNGKey(0))
    assert action.shape == (5,) and action.dtype == jnp.int32
    _, metrics = agent.update(state, _sequences(DISCRETE), jax.random.PRNGKey(1))
    assert np.isfinite(float(metrics["loss/policy"]))


def test_actions_land_in_the_box_and_boltzmann_acting_works():
    from heron.types import TimeStep

    timestep = TimeStep(
        jnp.ones(64, jnp.int32),
        jnp.zeros(64),
        jnp.ones(64),
        jax.random.normal(jax.random.PRNGKey(0), (64, 3)),
    )
    for acting in ("policy", "boltzmann"):
        agent = agents.make("crr", BOX, CRRConfig(acting=acting, **SMALL))
        state = agent.init(jax.random.PRNGKey(0))
        action, _, _ = agent.act(state, timestep, (), jax.random.PRNGKey(1))
        assert action.shape == (64, 1)
        assert float(action.min()) >= -2.0 and float(action.max()) <= 2.0
        greedy, _, _ = agent.act(
            state, timestep, (), jax.random.PRNGKey(2), mode="predict", temperature=0.0
        )
        again, _, _ = agent.act(
            state, timestep, (), jax.random.PRNGKey(3), mode="predict", temperature=0.0
        )
        np.testing.assert_array_equal(greedy, again)


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
        ({"mini_batch_length": 1}, "crr.mini_batch_length must be >= 2"),
        ({"discount": 1.5}, r"crr.discount must be in \[0, 1\]"),
        ({"acting": "greedy"}, "crr.acting must be one of policy, boltzmann"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        CRRConfig(**overrides)


def _small_crr_run(**overrides):
    from heron.training import RunConfig

    settings = dict(
        env="gymnax:Pendulum-v1",
        steps=512,
        num_envs=4,
        eval_every_n=64,
        n_evals=2,
        eval_temperatures=(0.0,),
        save_every_n=32,
        done_frac_for_policy_save=0.0,
    )
    settings.update(overrides)
    return RunConfig(**settings)


SMALL_CRR = CRRConfig(
    mini_batch_size=16, min_replay_size=64, replay_ratio=0.5, unroll_length=2, **SMALL
)


def test_off_policy_updates_wait_for_min_replay_size(tmp_path):
    import json

    from heron.training import build, train

    setup = build("crr", SMALL_CRR, _small_crr_run())
    assert setup.agent.schedule.num_updates == 4  # 0.5 x (2 steps x 4 envs)
    summary = train(setup, str(tmp_path / "run"))
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    updates = [(line["step"], line["train/updates"]) for line in lines if line["kind"] == "train"]
    # The unrolls add 8 steps each (the first one also its starting step): 64 stored at step 64.
    assert [u for step, u in updates if step < 64] == [0.0] * 7
    assert all(u == 4.0 for step, u in updates if step >= 64)
    assert summary["steps"] == 512 and summary["final_eval_return"] is not None


def test_off_policy_resume_is_exact(tmp_path, monkeypatch):
    from heron.training import build, checkpoints, resume, train

    straight = train(build("crr", SMALL_CRR, _small_crr_run()), str(tmp_path / "a"))
    original = checkpoints.Checkpointer.save

    class Killed(Exception):
        pass

    def save_then_die(self, step, state):
        original(self, step, state)
        if step == 32:
            raise Killed

    monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_die)
    with pytest.raises(Killed):
        train(build("crr", SMALL_CRR, _small_crr_run()), str(tmp_path / "b"))
    monkeypatch.setattr(checkpoints.Checkpointer, "save", original)
    assert resume(str(tmp_path / "b"))["params_digest"] == straight["params_digest"]


def test_crr_on_gymnasium_pendulum_from_the_cli(tmp_path, capsys):
    import json

    from heron.cli import main

    argv = [
        "train",
        "crr",
        "--env",
        "gym:Pendulum-v1",
        "--steps",
        "256",
        "--num-envs",
        "4",
        "--n-evals",
        "2",
        "--eval-temperatures",
        "0",
        "--run-dir",
        str(tmp_path / "run"),
        "--crr.hidden-sizes",
        "32",
        "32",
        "--crr.min-replay-size",
        "32",
        "--crr.mini-batch-size",
        "16",
        "--crr.acting",
        "boltzmann",
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 256 and -2000 < summary["final_eval_return"] <= 0
