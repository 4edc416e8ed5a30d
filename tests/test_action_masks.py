"""Action masks: an environment that says which actions are legal (a gymnax environment's
``action_mask(state, params)``; a Gymnasium environment's ``info["action_mask"]`` or
sb3-contrib's ``action_masks()``) gets policies that never take an illegal action, in PPO
and DQN, when acting, evaluating and learning; agents that would ignore masks refuse them."""

from __future__ import annotations

import json

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import heron
from heron import api, envs
from heron.agents import ConfigError, PPOConfig
from heron.agents.dqn import epsilon_greedy
from heron.envs.check import MASKED_NOTE
from heron.envs.legal_choice import LegalChoice
from heron.networks import distributions
from heron.run_config import RunConfig
from heron.specs import ActionSpec
from heron.training.driver import TrainingError

N = 6


class UnmaskedLegalChoice(LegalChoice):
    """The same game without telling the agent which actions are legal."""

    action_mask = None


class _LegalPairs(gymnasium.Env):
    """Two of four actions legal at each step (drawn from the env's own generator); an
    illegal action raises. Ends after 8 steps."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._draw()
        return self._legal.astype(np.float32) * 0, self._info()

    def _draw(self):
        self._legal = np.zeros(4, bool)
        self._legal[self.np_random.choice(4, 2, replace=False)] = True

    def _info(self):
        return {}

    def action_masks(self):
        return self._legal.copy()

    def step(self, action):
        if not self._legal[int(action)]:
            raise ValueError(f"illegal action {action} (legal: {np.flatnonzero(self._legal)})")
        self._t += 1
        self._draw()
        return np.zeros(4, np.float32), 1.0, self._t >= 8, False, self._info()


class MaskInInfo(_LegalPairs):
    """Gymnasium's convention: the mask in ``info["action_mask"]``."""

    action_masks = None

    def _info(self):
        return {"action_mask": self._legal.copy()}


class MaskByMethod(_LegalPairs):
    """sb3-contrib's convention: an ``action_masks()`` method."""


# --------------------------------------------------------------------------- the pieces


@jax.jit
def _masked_draws(logits, mask, key, temperature):
    dist = distributions.make(ActionSpec(kind="discrete", n_actions=N), logits, action_mask=mask)
    samples = jax.vmap(lambda k: dist.sample(k, temperature))(jax.random.split(key, 64))
    return samples, dist.mode(), dist.entropy(), jax.nn.softmax(dist.logits)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=N, max_size=N),
    st.lists(st.booleans(), min_size=N, max_size=N).filter(any),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, 0.3, 1.0, 4.0]),
)
def test_a_masked_categorical_never_draws_an_illegal_action(logits, mask, seed, temperature):
    logits, mask = np.asarray(logits, np.float32), np.asarray(mask)
    samples, mode, entropy, probs = _masked_draws(
        logits, mask, jax.random.PRNGKey(seed), temperature
    )
    assert mask[np.asarray(samples)].all() and mask[int(mode)]
    legal = np.exp(logits[mask] - logits[mask].max())
    legal /= legal.sum()  # the softmax over the legal actions alone
    np.testing.assert_allclose(np.asarray(probs)[mask], legal, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(probs)[~mask] == 0.0)
    np.testing.assert_allclose(entropy, -np.sum(legal * np.log(legal)), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("epsilon", [0.0, 1.0])
def test_dqn_explores_and_exploits_among_the_legal_actions_only(epsilon):
    q = jax.random.normal(jax.random.PRNGKey(0), (256, 1, N))
    mask = jax.random.uniform(jax.random.PRNGKey(1), (256, 1, N)) < 0.3
    mask = mask.at[:, :, 0].set(True)  # at least one legal action
    actions = np.asarray(epsilon_greedy(jax.random.PRNGKey(2), q, epsilon, mask))
    assert np.take_along_axis(np.asarray(mask), actions[..., None], -1).all()
    if epsilon == 0.0:
        best = np.argmax(np.where(np.asarray(mask), np.asarray(q), -np.inf), -1)
        np.testing.assert_array_equal(actions, best)
    else:  # uniform over the legal ones: every legal action of a step is drawn somewhere
        assert len(np.unique(actions)) == N


@pytest.mark.parametrize("env_class", [MaskInInfo, MaskByMethod])
def test_a_gymnasium_environment_gives_its_masks_at_every_step(env_class):
    env = envs.make(envs.id_of(env_class()), 3)
    assert env.spec.action_mask and env.spec.action_mask_shape == (4,)
    step = jax.jit(env.step)
    state, timestep = jax.jit(env.reset)(jax.random.PRNGKey(0))
    for _ in range(20):
        mask = np.asarray(timestep.action_mask)
        assert mask.shape == (3, 4) and (mask.sum(-1) == 2).all()
        state, timestep = step(state, jnp.asarray(np.argmax(mask, -1), jnp.int32))


@pytest.mark.parametrize("env", [MaskInInfo(), MaskByMethod(), "heron:LegalChoice-v0"])
def test_check_env_plays_the_legal_actions(env):
    """The gymnasium environments raise on an illegal action; LegalChoice terminates an
    episode on one (its episodes are otherwise cut at 20 steps): random legal play never
    does either."""
    report = envs.check(env, steps=200)
    assert report.ok, report.problems
    assert MASKED_NOTE in report.notes
    if report.kind == "gymnasium":  # 8 steps an episode, then terminated
        assert report.episodes == report.terminated == 25
    else:  # 16 environments, 200 steps each, 21 an episode (its 20 and the reset's FIRST)
        assert report.truncated == report.episodes == 16 * 9 and report.terminated == 0


def test_a_gymnax_environment_without_action_mask_gives_none():
    env = envs.make("gymnax:CartPole-v1", 2)
    assert not env.spec.action_mask
    assert jax.jit(env.reset)(jax.random.PRNGKey(0))[1].action_mask == ()


@pytest.mark.parametrize("algo", ["sac", "crr", "svg0", "td3"])
def test_agents_that_would_ignore_masks_refuse_them(algo):
    with pytest.raises(ConfigError, match=r"action masks.*dqn, ppo"):
        api.build(algo, None, RunConfig(env="heron:LegalChoice-v0"))


def test_a_token_policy_refuses_masks():
    with pytest.raises(ConfigError, match="vocab_size=16"):
        api.build("ppo", PPOConfig(vocab_size=16), RunConfig(env="heron:LegalChoice-v0"))


@pytest.mark.parametrize("algo, env_class", [("ppo", MaskInInfo), ("dqn", MaskByMethod)])
def test_training_on_a_gymnasium_environment_never_takes_an_illegal_action(
    algo, env_class, tmp_path
):
    """The environment raises on an illegal action, in training and evaluation alike: the
    run ends normally, so no action taken was illegal (random exploration included)."""
    run = RunConfig(
        env=env_class(), steps=512, num_envs=8, eval_every_n=8, n_evals=4, checkpoints=False
    )
    summary = api.train(api.build(algo, None, run), str(tmp_path / "run"))
    assert summary["steps"] >= 512
    assert summary["final_eval_return"] == 8.0  # every episode played to its end


def test_the_same_environment_without_masks_stops_the_run_at_an_illegal_action(tmp_path):
    """What the test above would see if a policy took an illegal action."""

    class Unmasked(MaskByMethod):
        action_masks = None

    run = RunConfig(
        env=Unmasked(), steps=512, num_envs=8, eval_every_n=8, n_evals=4, checkpoints=False
    )
    with pytest.raises(TrainingError, match="illegal action"):
        api.train(api.build("ppo", None, run), str(tmp_path / "run"))


def _evals(run_dir, temperature=0.0):
    lines = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    return [
        (e["step"], round(e["return_mean"], 2))
        for e in lines
        if e["kind"] == "eval" and e["temperature"] == temperature
    ]


@pytest.fixture(scope="module")
def masked_ppo_run(tmp_path_factory):
    """PPO's defaults on LegalChoice, stopped at the first greedy evaluation >= 14 within 50
    evaluations' worth of steps. Measured (seeds 0-3, greedy, evaluated every iteration):
    first >= 14 at 22,528 / 19,456 / 25,600 / 21,504 steps; random legal play earns ~10,
    the best legal choice 15 on average."""
    run_dir = tmp_path_factory.mktemp("masked") / "run"
    run = RunConfig(env="heron:LegalChoice-v0", steps=51_200, seed=0, stop_at_return=14.0)
    return api.train(api.build("ppo", None, run), str(run_dir)), run_dir


@pytest.mark.slow
def test_masked_ppo_learns_where_the_unmasked_one_cannot(masked_ppo_run, tmp_path):
    """Unmasked, the agent cannot see which actions are legal: PPO's defaults, seeds 0-1,
    best greedy 0.01 and -0.14 over 51,200 steps (an episode's first illegal action ends
    it at -1)."""
    masked, run_dir = masked_ppo_run
    assert masked["stopped_at_return"], _evals(run_dir)
    # an illegal action would end an episode at -1: with masks none does, at any temperature
    lines = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert min(e["return_mean"] for e in lines if e["kind"] == "eval") > 8.0
    run = RunConfig(env=UnmaskedLegalChoice(), steps=masked["steps"], seed=0)
    unmasked = api.train(api.build("ppo", None, run), str(tmp_path / "unmasked"))
    assert unmasked["best_eval_return"] < 2.0, _evals(tmp_path / "unmasked")


@pytest.mark.slow
def test_masked_dqn_learns_legal_choice(tmp_path):
    """DQN's defaults (evaluated every 4,000 steps), seeds 0-3: first greedy >= 13.5 at 12k
    steps each (>= 14 at 24k, 16k, 12k, 12k); unmasked, seed 0's best -0.17 over 48k."""
    run = RunConfig(
        env="heron:LegalChoice-v0", steps=48_000, seed=0, stop_at_return=13.5, eval_every_n=125
    )
    summary = api.train(api.build("dqn", None, run), str(tmp_path / "run"))
    assert summary["stopped_at_return"], _evals(tmp_path / "run")


def test_a_loaded_policy_of_a_masked_run_takes_the_mask(masked_ppo_run):
    _, run_dir = masked_ppo_run
    policy = heron.load(str(run_dir), temperature=1.0)
    values = np.linspace(0.9, 0.0, 10, dtype=np.float32)  # action 0 is worth most
    legal = np.zeros(10, bool)
    legal[[3, 6, 8]] = True
    chosen = {int(policy(values, action_mask=legal)) for _ in range(20)}
    assert chosen <= {3, 6, 8}
    only = np.eye(10, dtype=bool)[[7, 2]]  # one legal action each
    np.testing.assert_array_equal(policy(np.stack([values, values]), action_mask=only), [7, 2])
    with pytest.raises(ValueError, match="action_mask=..."):
        policy(values)
    with pytest.raises(ValueError, match=r"does not fit \(10,\)"):
        policy(values, action_mask=legal[:4])
