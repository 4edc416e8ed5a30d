import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron import agents
from heron.agents import ConfigError, PPOConfig
from heron.specs import EnvSpec, action_spec_from_space
from heron.types import StepType, TimeStep


def _spec(action_space, obs_shape=(3,)):
    return EnvSpec(obs_shape, np.float32, action_spec_from_space(action_space))


def _timestep(batch, obs_shape=(3,)):
    return TimeStep(
        step_type=jnp.full((batch,), StepType.MID, jnp.int32),
        reward=jnp.zeros(batch),
        discount=jnp.ones(batch),
        observation=jax.random.normal(jax.random.PRNGKey(1), (batch,) + obs_shape),
    )


@pytest.mark.parametrize(
    "space, action_shape, dtype",
    [
        (gymnasium.spaces.Discrete(4), (5,), jnp.int32),
        (gymnasium.spaces.MultiDiscrete([3, 3]), (5, 2), jnp.int32),
        (gymnasium.spaces.Box(-1.0, 1.0, (2,)), (5, 2), jnp.float32),
    ],
)
@pytest.mark.parametrize("two_towers", [True, False])
def test_act_serves_every_action_space(space, action_shape, dtype, two_towers):
    agent = agents.make("ppo", _spec(space), PPOConfig(two_towers=two_towers))
    state = agent.init(jax.random.PRNGKey(0))
    action, carry, extras = agent.act(state, _timestep(5), (), jax.random.PRNGKey(2))
    assert action.shape == action_shape and action.dtype == dtype
    assert extras["log_prob"].shape == (5,) and extras["value"].shape == (5,)
    greedy, _, _ = agent.act(
        state, _timestep(5), (), jax.random.PRNGKey(3), mode="predict", temperature=0.0
    )
    again, _, _ = agent.act(
        state, _timestep(5), (), jax.random.PRNGKey(4), mode="predict", temperature=0.0
    )
    np.testing.assert_array_equal(greedy, again)  # temperature 0 is deterministic


def test_two_towers_have_separate_torsos():
    spec = _spec(gymnasium.spaces.Discrete(2))
    shared = agents.make("ppo", spec, PPOConfig(two_towers=False)).init(jax.random.PRNGKey(0))
    towers = agents.make("ppo", spec, PPOConfig(two_towers=True)).init(jax.random.PRNGKey(0))
    count = lambda state: sum(x.size for x in jax.tree.leaves(state.params))
    assert count(towers) > count(shared)


def _batch(agent, state, n=64):
    timestep = _timestep(n)
    action, _, extras = agent.act(state, timestep, (), jax.random.PRNGKey(5))
    from heron.agents.ppo import PPOBatch

    advantage = jnp.where(action == 1, 1.0, -1.0)
    return PPOBatch(
        timestep.observation[None],
        action[None],
        extras["log_prob"][None],
        advantage[None],
        extras["value"][None] + 1.0,
        jnp.ones((1, n)),
        jnp.zeros((1, n), bool),
    )


def test_update_moves_policy_towards_positive_advantages():
    agent = agents.make(
        "ppo",
        _spec(gymnasium.spaces.Discrete(2)),
        PPOConfig(learning_rate=1e-2, entropy_weight=0.0),
    )
    state = agent.init(jax.random.PRNGKey(0))
    batch = _batch(agent, state)
    probability = lambda s: jnp.mean(jax.nn.softmax(_logits(agent, s))[:, 1])
    before = probability(state)
    for _ in range(10):
        state, metrics = agent.update(state, batch, jax.random.PRNGKey(0))
    assert probability(state) > before + 0.05
    assert int(state.update_step) == 10
    assert set(metrics) >= {
        "loss/total",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "ppo/approx_kl",
        "ppo/clip_fraction",
    }


def _logits(agent, state):
    from heron.networks import PolicyValueNet

    net = PolicyValueNet(
        spec=agent.spec.action,
        hidden_sizes=agent.config.hidden_sizes,
        activation=agent.config.activation,
        two_towers=agent.config.two_towers,
    )
    return net.apply(state.params, _timestep(64).observation)[0]


def test_first_update_has_ratio_one_and_zero_kl():
    agent = agents.make("ppo", _spec(gymnasium.spaces.Discrete(2)), PPOConfig())
    state = agent.init(jax.random.PRNGKey(0))
    _, metrics = agent.update(state, _batch(agent, state), jax.random.PRNGKey(0))
    assert abs(float(metrics["ppo/approx_kl"])) < 1e-6
    assert float(metrics["ppo/clip_fraction"]) == 0.0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("gamma", 1.5, r"ppo.gamma must be in \[0, 1\], got 1.5"),
        ("gamma", -0.1, r"ppo.gamma must be in \[0, 1\]"),
        ("gae_lambda", 2.0, r"ppo.gae_lambda must be in \[0, 1\], got 2.0"),
        ("epsilon", 0.0, r"ppo.epsilon must be > 0, got 0.0"),
        ("learning_rate", -1.0, "ppo.learning_rate must be > 0"),
        ("n_optimizer_steps", 0, "ppo.n_optimizer_steps must be >= 1"),
        ("optimizer_batch_size", 0, "ppo.optimizer_batch_size must be >= 1"),
        ("target_kl", 0.0, "ppo.target_kl must be > 0"),
        ("activation", "sigmoid", "ppo.activation must be one of"),
    ],
)
def test_config_refuses_out_of_range_values(field, value, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig(**{field: value})


def test_unknown_algorithm():
    with pytest.raises(
        agents.UnknownAgentError, match="unknown algorithm 'foo'; available: crr, ppo"
    ):
        agents.make("foo", _spec(gymnasium.spaces.Discrete(2)))


def test_scheduled_hyperparameters_follow_the_optimiser_step():
    config = PPOConfig(entropy_weight="linear(0.01, 0.0, 10)", epsilon="piecewise(0.3, 5, 0.1)")
    agent = agents.make("ppo", _spec(gymnasium.spaces.Discrete(2)), config)
    state = agent.init(jax.random.PRNGKey(0))
    batch = _batch(agent, state)
    seen = []
    for _ in range(12):
        state, metrics = agent.update(state, batch, jax.random.PRNGKey(0))
        seen.append((float(metrics["schedule/entropy_weight"]), float(metrics["schedule/epsilon"])))
    np.testing.assert_allclose(
        [s[0] for s in seen], [max(0.01 * (1 - u / 10), 0.0) for u in range(12)], atol=1e-7
    )
    assert [s[1] for s in seen] == pytest.approx([0.3] * 5 + [0.1] * 7)
    assert "schedule/gamma" not in metrics  # constants are not logged


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("gamma", "linear(0.9, 1.2, 100)", r"ppo.gamma must be in \[0, 1\], got linear"),
        ("entropy_weight", "linaer(0.01, 0, 10)", "accepted forms: a number"),
        ("learning_rate", "linear(1e-3, 0.0, 100)", "ppo.learning_rate must be > 0"),
    ],
)
def test_config_refuses_bad_schedules(field, value, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig(**{field: value})
