import dataclasses

import compiled
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron import agents
from heron.agents import ConfigError, NetworkConfig, PPOConfig
from heron.agents.ppo import PPOBatch, policy_value_network
from heron.networks import distributions
from heron.specs import EnvSpec, action_spec_from_space
from heron.types import Experience, StepType, TimeStep


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
    agent = compiled.make("ppo", _spec(space), PPOConfig(two_towers=two_towers))
    state = agent.init(jax.random.PRNGKey(0))
    carry = agent.initial_carry(5)
    action, _, extras = agent.act(state, _timestep(5), carry, jax.random.PRNGKey(2))
    assert action.shape == action_shape and action.dtype == dtype
    # several controls: one log-probability each (each control's ratio is clipped alone)
    multi = isinstance(space, gymnasium.spaces.MultiDiscrete)
    assert extras["log_prob"].shape == ((5, 2) if multi else (5,))
    assert extras["value"].shape == (5,)
    greedy, _ = agent.policy(state, _timestep(5), carry, jax.random.PRNGKey(3), 0.0)
    again, _ = agent.policy(state, _timestep(5), carry, jax.random.PRNGKey(4), 0.0)
    np.testing.assert_array_equal(greedy, again)  # temperature 0 is deterministic
    tiny, _ = agent.policy(state, _timestep(5), carry, jax.random.PRNGKey(4), 1e-20)
    np.testing.assert_array_equal(tiny, greedy)  # an underflowing temperature is greedy


def test_initial_log_std_is_the_gaussians_spread_at_the_start_and_refused_for_discrete():
    box = _spec(gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    params = agents.make("ppo", box, PPOConfig(initial_log_std=-2.0)).init(jax.random.PRNGKey(0))
    log_stds = [
        leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(params.params)
        if "log_std" in jax.tree_util.keystr(path)
    ]
    assert len(log_stds) == 1 and np.all(np.asarray(log_stds[0]) == -2.0)
    with pytest.raises(ConfigError, match=r"ppo.initial_log_std=-2 .* discrete"):
        agents.make("ppo", _spec(gymnasium.spaces.Discrete(2)), PPOConfig(initial_log_std=-2.0))


def test_two_towers_have_separate_torsos():
    spec = _spec(gymnasium.spaces.Discrete(2))
    shared = compiled.make("ppo", spec, PPOConfig(two_towers=False)).init(jax.random.PRNGKey(0))
    towers = compiled.make("ppo", spec, PPOConfig(two_towers=True)).init(jax.random.PRNGKey(0))
    count = lambda state: sum(x.size for x in jax.tree.leaves(state.params))  # noqa: E731
    assert count(towers) > count(shared)


def _batch(agent, state, n=64):
    timestep = _timestep(n)
    action, _, extras = agent.act(state, timestep, agent.initial_carry(n), jax.random.PRNGKey(5))
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


def _probability_of_one(agent, state):
    timestep = _timestep(64)
    keys = jax.random.split(jax.random.PRNGKey(9), 500)
    carry = agent.initial_carry(64)
    actions = jax.vmap(lambda k: agent.policy(state, timestep, carry, k, 1.0)[0])(keys)
    return float(jnp.mean(actions == 1))


def test_update_moves_policy_towards_positive_advantages():
    agent = compiled.make(
        "ppo", _spec(gymnasium.spaces.Discrete(2)), PPOConfig(learning_rate=1e-2, entropy_cost=0.0)
    )
    state = agent.init(jax.random.PRNGKey(0))
    batch = _batch(agent, state)
    before = _probability_of_one(agent, state)
    for _ in range(10):
        state, metrics = agent.update(state, batch, jax.random.PRNGKey(0))
    assert _probability_of_one(agent, state) > before + 0.05
    assert int(state.update_step) == 10
    assert set(metrics) >= {
        "loss/total",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "ppo/approx_kl",
        "ppo/clip_fraction",
    }


def test_summarize_grads_and_vars_logs_every_variables_norm_and_its_gradients():
    """ALF's summarize_grads_and_vars: vars/<path> is each parameter's norm, grads/<path> its
    gradient's, and their root sum of squares is grad_norm (a plain-loop reference)."""
    config = PPOConfig(learning_rate=1e-2, entropy_cost=0.0, summarize_grads_and_vars=True)
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), config)
    state = agent.init(jax.random.PRNGKey(0))
    _, metrics = agent.update(state, _batch(agent, state), jax.random.PRNGKey(0))
    leaves = jax.tree_util.tree_leaves_with_path(state.params)
    assert {k for k in metrics if k.startswith("vars/")} == {
        "vars/" + "/".join(str(k.key) for k in path) for path, _ in leaves
    }
    for path, leaf in leaves:
        name = "/".join(str(k.key) for k in path)
        assert float(metrics[f"vars/{name}"]) == pytest.approx(
            float(np.sqrt(sum(float(v) ** 2 for v in np.ravel(leaf)))), rel=1e-5
        )
    grads = [float(v) for k, v in metrics.items() if k.startswith("grads/")]
    assert len(grads) == len(leaves) and max(grads) > 0
    total = np.sqrt(sum(g**2 for g in grads))
    assert float(metrics["grad_norm"]) == pytest.approx(total, rel=1e-5)


def test_a_users_body_and_optimiser_serve_every_agent(monkeypatch):
    """Trax's policy_and_value_model / policy_and_value_optimizer from Python: a flax body
    registered by name is every agent's torso, an optax direction registered by name their
    optimiser; PPO learns with them; an unknown name is refused listing the known ones."""
    import flax.linen as nn
    import optax
    from contract_cases import CASES

    from heron.agents import learning
    from heron.networks import register_body

    class Body(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.relu(nn.Dense(8, name="users_dense")(x))

    from heron.networks import network as network_module

    monkeypatch.setattr(network_module, "BODIES", {})  # this test's registrations only
    monkeypatch.setattr(learning, "OPTIMIZERS", {})
    register_body("users_body", lambda config: Body())
    learning.register_optimizer("users_rms", lambda: optax.scale_by_rms())
    users = {"torso": "users_body"}
    for name, case in CASES.items():
        network = dataclasses.replace(case.config.network, **users)
        config = dataclasses.replace(case.config, network=network, optimizer="users_rms")
        spec = _spec(gymnasium.spaces.Box(-1.0, 1.0, (1,)))
        if name in ("ppo", "dqn"):
            spec = _spec(gymnasium.spaces.Discrete(2))
        state = jax.eval_shape(agents.make(name, spec, config).init, jax.random.PRNGKey(0))
        paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(state)}
        assert any("users_dense" in p for p in paths), name
        assert any("ScaleByRmsState" in repr(leaf) for leaf in [state]), name
    config = PPOConfig(learning_rate=1e-2, entropy_cost=0.0, network=NetworkConfig(**users),
                       optimizer="users_rms")  # fmt: skip
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), config)
    state = agent.init(jax.random.PRNGKey(0))
    batch, before = _batch(agent, state), _probability_of_one(agent, state)
    for _ in range(10):
        state, _ = agent.update(state, batch, jax.random.PRNGKey(0))
    assert _probability_of_one(agent, state) > before + 0.05
    with pytest.raises(ConfigError, match="ppo.network.torso must be one of mlp, layer_norm_m"):
        PPOConfig(network=NetworkConfig(torso="no_such_body"))
    with pytest.raises(ConfigError, match="ppo.optimizer must be one of adam, users_rms"):
        PPOConfig(optimizer="sgdd")


def test_first_update_has_ratio_one_and_zero_kl():
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), PPOConfig())
    state = agent.init(jax.random.PRNGKey(0))
    _, metrics = agent.update(state, _batch(agent, state), jax.random.PRNGKey(0))
    assert abs(float(metrics["ppo/approx_kl"])) < 1e-6
    assert float(metrics["ppo/clip_fraction"]) == 0.0


def _unroll(agent, state, num_envs=16, length=8, seed=0):
    """A collected unroll [B, T+1] with the behaviour policy's extras."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    observation = jax.random.normal(keys[0], (num_envs, length + 1, 3))
    step_type = jnp.where(
        jax.random.uniform(keys[1], (num_envs, length + 1)) < 0.1, StepType.LAST, StepType.MID
    ).astype(jnp.int32)
    timestep = TimeStep(
        step_type,
        jnp.ones_like(observation[..., 0]),
        jnp.ones_like(observation[..., 0]),
        observation,
    )
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), timestep)
    action, _, extras = agent.act(state, flat, agent.initial_carry(flat.reward.shape[0]), keys[2])
    unflat = lambda x: x.reshape((num_envs, length + 1) + x.shape[1:])  # noqa: E731
    return Experience.from_timestep(timestep, unflat(action), jax.tree.map(unflat, extras))


def _learn_once(config, unroll_length=8, num_envs=16):
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), config)
    state = agent.init(jax.random.PRNGKey(0))
    replay = agent.make_replay(num_envs)
    unroll = _unroll(agent, state, num_envs, unroll_length)
    replay_state = replay.init(jax.tree.map(lambda x: x[:, 0], unroll))
    replay_state = replay.add(replay_state, unroll)
    assert bool(replay.can_sample(replay_state))
    new_state, replay_state, metrics = jax.jit(agent.learn, static_argnums=1)(
        state, replay, replay_state, jax.random.PRNGKey(1)
    )
    assert not bool(replay.can_sample(replay_state))  # the unroll is consumed once
    return agent, state, new_state, metrics, unroll


def test_learn_runs_every_epoch_over_every_minibatch():
    config = PPOConfig(unroll_length=8, batch_size=32, num_epochs=3)
    _, state, new_state, metrics, _ = _learn_once(config)
    assert float(metrics["train/updates"]) == 3 * (16 * 8 // 32)
    assert int(new_state.update_step) == 12


def test_target_kl_stops_after_the_update_that_exceeds_it():
    """Trax's rule: the KL to the behaviour policy is measured on the whole batch after each
    update; the update that crosses 1.5 x target_kl is kept, and no further one is made."""
    loose = PPOConfig(unroll_length=8, batch_size=16, num_epochs=4, learning_rate=3e-2)
    agent, state, _, free_metrics, unroll = _learn_once(loose)
    total = 4 * (16 * 8 // 16)
    assert float(free_metrics["train/updates"]) == total
    target_kl = 0.002
    _, _, new_state, metrics, _ = _learn_once(dataclasses.replace(loose, target_kl=target_kl))
    updates = int(metrics["train/updates"])
    assert 1 <= updates < total
    assert int(new_state.update_step) == updates
    assert _whole_batch_kl(agent, new_state.params, unroll) > 1.5 * target_kl
    assert _whole_batch_kl(agent, state.params, unroll) == pytest.approx(0.0, abs=1e-6)


def _whole_batch_kl(agent, params, unroll):
    """E[(r - 1) - log r] over the executed steps of ``unroll`` [B, T+1], r = pi / mu."""
    network = policy_value_network(agent.spec, agent.config)
    observation = unroll.observation[:, :-1]
    first = jnp.zeros(observation.shape[:2], bool)
    out = network.step(params, network.initial_state(first.shape), observation, first)[1]
    dist = distributions.make(agent.spec.action, out["policy"])
    log_ratio = dist.log_prob(unroll.action[:, :-1]) - unroll.extras["log_prob"][:, :-1]
    mask = unroll.step_type[:, :-1] != StepType.LAST
    return float(jnp.sum((jnp.expm1(log_ratio) - log_ratio) * mask) / jnp.sum(mask))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("discount", 1.5, r"ppo.discount must be in \[0, 1\], got 1.5"),
        ("discount", -0.1, r"ppo.discount must be in \[0, 1\]"),
        ("gae_lambda", 2.0, r"ppo.gae_lambda must be in \[0, 1\], got 2.0"),
        ("clip_range", 0.0, r"ppo.clip_range must be > 0, got 0.0"),
        ("learning_rate", -1.0, "ppo.learning_rate must be > 0"),
        ("num_epochs", 0, "ppo.num_epochs must be >= 1"),
        ("batch_size", 0, "ppo.batch_size must be >= 1"),
        ("target_kl", 0.0, "ppo.target_kl must be > 0"),
        ("network", NetworkConfig(activation="sigmoid"), "ppo.network.activation must be one of"),
        ("network", NetworkConfig(hidden_sizes=()), "ppo.network.hidden_sizes must be one or more"),
        ("use_rollout_state", True, "ppo.use_rollout_state needs a recurrent core"),
    ],
)
def test_config_refuses_out_of_range_values(field, value, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig(**{field: value})


@pytest.mark.parametrize("old", ["gamma", "n_optimizer_steps", "optimizer_batch_size"])
def test_trax_names_are_refused_not_reinterpreted(old):
    with pytest.raises(TypeError):
        PPOConfig(**{old: 1})
    assert old in PPOConfig.renamed_fields


def test_batches_that_do_not_tile_are_refused_when_the_replay_is_made():
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), PPOConfig(batch_size=300))
    with pytest.raises(ConfigError, match=r"ppo.batch_size=300 sequences must divide the 1024"):
        agent.make_replay(32)
    with pytest.raises(ConfigError, match="ppo cannot learn from the 'uniform' replayer"):
        agent.make_replay(32, "uniform")


def test_unknown_algorithm():
    available = "crr, dqn, ppo, sac, svg0"
    with pytest.raises(
        agents.UnknownAgentError, match=f"unknown algorithm 'foo'; available: {available}"
    ):
        agents.make("foo", _spec(gymnasium.spaces.Discrete(2)))


def test_scheduled_hyperparameters_follow_the_optimiser_step():
    config = PPOConfig(entropy_cost="linear(0.01, 0.0, 10)", clip_range="piecewise(0.3, 5, 0.1)")
    agent = compiled.make("ppo", _spec(gymnasium.spaces.Discrete(2)), config)
    state = agent.init(jax.random.PRNGKey(0))
    batch = _batch(agent, state)
    seen = []
    for _ in range(12):
        state, metrics = agent.update(state, batch, jax.random.PRNGKey(0))
        seen.append(
            (float(metrics["schedule/entropy_cost"]), float(metrics["schedule/clip_range"]))
        )
    np.testing.assert_allclose(
        [s[0] for s in seen], [max(0.01 * (1 - u / 10), 0.0) for u in range(12)], atol=1e-7
    )
    assert [s[1] for s in seen] == pytest.approx([0.3] * 5 + [0.1] * 7)
    assert "schedule/discount" not in metrics  # constants are not logged


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("discount", "linear(0.9, 1.2, 100)", r"ppo.discount must be in \[0, 1\], got linear"),
        ("entropy_cost", "linaer(0.01, 0, 10)", "accepted forms: a number"),
        ("learning_rate", "linear(1e-3, 0.0, 100)", "ppo.learning_rate must be > 0"),
    ],
)
def test_config_refuses_bad_schedules(field, value, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig(**{field: value})
