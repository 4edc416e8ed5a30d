"""The seeds' semantics where heron used to differ from them (issue 13, part 2): each test
tells the seed's behaviour from the old one. (PPO's target_kl: tests/test_ppo.py; recurrent
CRR's target start state: tests/test_crr_recurrent.py; CRR per MultiDiscrete control:
tests/test_crr.py.)"""

import json
import os

import compiled
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import CountingJaxEnv, CountingParams
from test_crr import DISCRETE, _critic_preferring_action_one, _timestep

from heron import agents, api, envs
from heron.agents import CRRConfig, NetworkConfig, PPOConfig
from heron.agents.base import ReplayConfig
from heron.configs import ConfigError
from heron.training import RunConfig, checkpoints
from heron.training.driver import seed_keys
from heron.training.program import ReplayView


def test_replayed_observations_are_normalised_with_the_latest_statistics():
    """ALF re-applies its observation transform to replayed experience: the replay keeps raw
    observations, and a sample is normalised with the statistics of the moment it is drawn
    (not those of the moment it was collected)."""
    config = CRRConfig(
        network=NetworkConfig(hidden_sizes=(8,), torso="layer_norm_mlp", activation="elu"),
        batch_size=8,
        replay=ReplayConfig(min_size=16),
    )
    run = RunConfig(env="gymnax:Pendulum-v1", num_envs=4, normalize_observations=True)
    setup = api.build("crr", config, run)
    program = setup.program()
    state = program.init(seed_keys([0]))
    for _ in range(20):
        state, _ = program.iteration(state, np.int32(1))
    one = jax.tree.map(lambda x: x[0], state)
    stored = one.replay_state.data.observation[:, : int(one.replay_state.size)]
    assert float(jnp.max(jnp.abs(stored[..., :2]))) <= 1.0 + 1e-6  # cos, sin: raw, not scaled
    stats = setup.source.observations(one.source_state).stats
    seen = ReplayView(setup.replay, setup.source.view(one.source_state))
    batch, _ = seen.sample(one.replay_state, jax.random.PRNGKey(1))
    raw, _ = setup.replay.sample(one.replay_state, jax.random.PRNGKey(1))
    expected = np.clip((raw.observation - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10)
    np.testing.assert_allclose(batch.observation, expected, rtol=1e-5, atol=1e-6)


def _uniform_policy(params):
    """The policy head's weights zeroed: equal logits everywhere, so the mode is action 0."""

    def zero_head(path, x):
        return jnp.zeros_like(x) if "head" in jax.tree_util.keystr(path) else x

    return jax.tree_util.tree_map_with_path(zero_head, params)


def test_boltzmann_resampling_serves_evaluation_too():
    """Acme's ExpQWeightedPolicy for evaluation (``crr.eval_acting boltzmann``): at
    temperature 0 the candidate of highest Q, where the plain policy takes its mode."""
    settings = dict(
        network=NetworkConfig(hidden_sizes=(8,), torso="mlp", activation="tanh"),
        num_atoms=11,
        vmin=-10.0,
        vmax=10.0,
        boltzmann_samples=8,
    )
    timestep = _timestep(2000, (4,))
    greedy = {}
    for eval_acting in ("policy", "boltzmann"):
        agent = compiled.make("crr", DISCRETE, CRRConfig(eval_acting=eval_acting, **settings))
        state = _critic_preferring_action_one(agent.init(jax.random.PRNGKey(0)), 11)
        state = state._replace(policy_params=_uniform_policy(state.policy_params))
        carry = agent.initial_carry(2000)
        action, _ = agent.policy(state, timestep, carry, jax.random.PRNGKey(1), 0.0)
        greedy[eval_acting] = float(jnp.mean(action == 1))
    assert greedy["policy"] == 0.0  # the mode of a uniform policy: the first action
    assert greedy["boltzmann"] == pytest.approx(1 - 0.5**8, abs=0.01)  # whenever one is 1


def test_options_that_only_change_collection_are_refused_offline(tmp_path):
    spec = envs.make("gymnax:Pendulum-v1", 1).spec
    """One rule for every agent: what a config declares ``collecting`` is refused by name
    when a run collects nothing, whatever else it sets."""
    with pytest.raises(
        ConfigError, match="crr.acting='boltzmann' sets how experience is collected"
    ):
        compiled.make("crr", spec, CRRConfig(acting="boltzmann"), collects=False)
    with pytest.raises(ConfigError, match="svg0.exploration_noise=0.2 widens the policy"):
        compiled.make("svg0", spec, agents.SVG0Config(exploration_noise=0.2), collects=False)
    cartpole = envs.make("gymnax:CartPole-v1", 1).spec
    with pytest.raises(ConfigError, match="dqn.epsilon=0.1 is the exploration rate"):
        compiled.make("dqn", cartpole, agents.DQNConfig(epsilon=0.1), collects=False)
    assert compiled.make("crr", spec, CRRConfig(eval_acting="boltzmann"), collects=False)
    assert compiled.make("dqn", cartpole, agents.DQNConfig(), collects=False)


class NeverTerminates(CountingJaxEnv):
    """The counting env whose episodes only ever end at the time limit (truncated)."""

    def step_env(self, key, state, action, params):
        obs, state, reward, _, info = super().step_env(key, state, action, params)
        return obs, state, reward, jnp.array(False), info


class TerminatesEarly(CountingJaxEnv):
    """The counting env whose episodes terminate after two steps whatever the policy does
    (before the time limit of three), so every iteration ends episodes that are done."""

    def step_env(self, key, state, action, params):
        obs, state, reward, _, info = super().step_env(key, state, action, params)
        return obs, state, reward, state.time >= 2, info


envs.register("Truncated-v0", lambda: (NeverTerminates(), CountingParams()))
envs.register("Terminated-v0", lambda: (TerminatesEarly(), CountingParams()))


@pytest.mark.parametrize(
    "env, max_timestep, saves",
    [
        ("heron:Truncated-v0", None, [6, 7, 8]),
        ("heron:Truncated-v0", 2, [8]),
        ("heron:Terminated-v0", 2, [6, 7, 8]),
    ],
)
def test_the_save_rule_counts_the_episodes_the_environment_ended(
    tmp_path, env, max_timestep, saves
):
    """Trax's done_frac_for_policy_save waits for episodes that are done, not for those its
    trainer cut at max_timestep. An episode ended by the environment's own time limit is done
    (old gym's TimeLimit said so; a run on an env that never terminates, like HalfCheetah,
    still saves on schedule); one cut by --max-timestep is not, so Truncated-v0 cut at 2
    saves only at the end; Terminated-v0's episodes terminate at step 2 and count."""
    run = RunConfig(
        env=env, steps=8 * 64, num_envs=4, save_every_n=1, done_frac_for_policy_save=0.5,
        n_evals=1, eval_every_n=100, keep_checkpoints=3, max_timestep=max_timestep,
    )  # fmt: skip
    config = PPOConfig(unroll_length=16, batch_size=16)
    api.train(api.build("ppo", config, run), str(tmp_path / "run"))
    assert checkpoints.all_steps(str(tmp_path / "run")) == saves
    lines = [json.loads(x) for x in open(os.path.join(tmp_path, "run", "metrics.jsonl"))]
    assert sum(x["episodes"] for x in lines if x["kind"] == "train") > 0  # episodes ended
