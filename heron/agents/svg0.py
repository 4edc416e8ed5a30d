"""SVG(0) with a learned prior and continuous Retrace (Acme's ``svg0_prior`` learner).

Stochastic Value Gradients (Heess et al., 2015, https://arxiv.org/abs/1510.09142) with the
behaviour prior of Galashov et al. (2019, https://arxiv.org/abs/1905.01240), trained
off-policy from the ``uniform`` replay on sequences of ``sequence_length`` = T+1 steps
(time-major [T+1, B] in ``update``; the transition t -> t+1 uses the reward and discount
of step t+1, see ``heron/types.py``):

* critic: ``0.5 (Q_ret_t - Q_online(s_t, a_t))^2``, where ``Q_ret`` are continuous Retrace
  targets (Munos et al., 2016, https://arxiv.org/abs/1606.02647) built from the target
  critic at the taken actions, the target value ``V(s_t) = mean_n Q_target(s_t, a_n)`` over
  ``num_action_samples`` target-policy samples, and importance weights
  ``rho_t = exp(log pi_target(a_t|s_t) - log mu(a_t|s_t))``, ``mu`` the behaviour policy
  whose log-probability ``act`` records in the experience (``extras["log_prob"]``);
* policy: ``-(mean_n Q_target(s_t, a_n) + entropy_cost * H_t)`` with ``a_n`` reparameterised
  samples of the online policy and ``H_t = -mean_n log pi(a_n|s_t)`` (sample-based);
* prior (``prior=True``): ``KL(pi_online || prior_target) * distillation_cost`` is added to
  the policy loss and subtracted (without gradient) from the value targets and the
  bootstrap value; the prior itself learns ``KL(pi_online || prior)`` (gradient into the
  prior only).

A transition t -> t+1 where step t+1 is FIRST is the environment's reset (its action was
never executed): its importance weight is 0, which cuts the Retrace trace there, and every
loss term at t is masked out (``heron.ops.restart_mask``). Losses are means over the
unmasked transitions. Separate Adam optimisers for the policy, the critic and the prior;
hard copies of every online network (prior included) into its target every
``target_update_period`` updates.

Where heron differs from Acme, on purpose:

* the sample-based entropy keeps the reparameterisation path (Acme stops the gradient
  through the samples, which leaves its entropy gradient zero in expectation);
* the analytic KL of two tanh-squashed Gaussians is the KL of the Gaussians before the
  squashing, as with Acme's distributions; that is exact, since tanh is a bijection and KL
  divergence is invariant under a shared bijection.

Continuous (Box) actions only: SVG(0) differentiates Q through reparameterised actions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import distrax
import jax
import jax.numpy as jnp
import optax

from heron import ops, parallel
from heron.agents.base import Agent, ConfigError, check, check_scheduled, replay_schedule
from heron.networks import actor_critic, recurrent_actor_critic
from heron.networks.recurrent import CORES as RECURRENT_CORES
from heron.networks.recurrent import zero_core_state
from heron.schedules import as_schedule
from heron.specs import EnvSpec
from heron.types import Experience, StepType, TimeStep

MIN_RHO = 1e-20  # added to importance weights before the log (Acme's _MIN_LOG_VAL)
CORES = ("none", *RECURRENT_CORES)


class MissingExtrasError(ValueError):
    """Experience without what the behaviour policy must have recorded."""


@dataclasses.dataclass(frozen=True)
class SVG0Config:
    """SVG0 hyperparameters (Acme's defaults where the issue names them)."""

    policy_learning_rate: float | str = 1e-4
    """Adam step size of the policy."""
    critic_learning_rate: float | str = 1e-4
    """Adam step size of the critic."""
    prior_learning_rate: float | str = 1e-4
    """Adam step size of the prior (with prior=True)."""
    discount: float | str = 0.99
    """Reward discount factor, in [0, 1]."""
    sequence_length: int = 10
    """Steps per sampled training sequence, T+1 >= 2 (T transitions)."""
    num_action_samples: int = 10
    """Policy samples per state for the target value and for the policy loss."""
    retrace_lambda: float = 1.0
    """Retrace's lambda, in [0, 1]: 0 gives one-step targets, 1 the longest traces."""
    entropy_cost: float = 1e-3
    """Weight of the sample-based entropy bonus in the policy loss, >= 0."""
    prior: bool = False
    """Learn a behaviour prior and regularise the policy towards it (KL)."""
    distillation_cost: float = 1e-3
    """Weight of KL(policy || prior) in the policy loss and the value targets, >= 0."""
    target_update_period: int = 100
    """Updates between hard copies into the target networks."""
    max_grad_norm: float = math.inf
    """Global-norm gradient clipping per network; inf (Acme: none) disables it."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the policy, the critic and the prior (LayerNorm MLPs)."""
    exploration_noise: float = 0.0
    """Std of Gaussian noise added to the policy's pre-tanh action when collecting, >= 0;
    the recorded behaviour log-probability includes it."""
    core: Literal["none", "lstm", "gru"] = "none"
    """Recurrent core after each network's torso; its state resets where episodes start."""
    core_size: int = 128
    """Units of the recurrent cores."""
    use_rollout_state: bool = False
    """Start each training sequence from the core states recorded when acting (ALF); the
    target networks start from the same states as their online networks (as R2D2 does)."""
    unroll_length: int = 1
    """Environment steps collected per environment per iteration."""
    replay_ratio: float = 0.25
    """Optimiser updates per collected environment step."""
    mini_batch_size: int = 256
    """Sequences per update (Acme's batch size)."""
    replay_capacity: int = 100_000
    """Steps kept per environment in the uniform replay."""
    min_replay_size: int = 1_000
    """Steps stored before the first update."""

    def __post_init__(self):
        for name in ("policy_learning_rate", "critic_learning_rate", "prior_learning_rate"):
            check_scheduled(f"svg0.{name}", getattr(self, name), 0.0, math.inf, False)
        check_scheduled("svg0.discount", self.discount, 0.0, 1.0)
        check(
            self.sequence_length >= 2,
            f"svg0.sequence_length must be >= 2 (a transition and its next step), "
            f"got {self.sequence_length}",
        )
        check(
            0.0 <= self.retrace_lambda <= 1.0,
            f"svg0.retrace_lambda must be in [0, 1], got {self.retrace_lambda}",
        )
        for name in ("entropy_cost", "distillation_cost", "exploration_noise"):
            check(getattr(self, name) >= 0, f"svg0.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_grad_norm", "replay_ratio"):
            check(getattr(self, name) > 0, f"svg0.{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "num_action_samples",
            "target_update_period",
            "core_size",
            "unroll_length",
            "mini_batch_size",
            "replay_capacity",
        ):
            check(getattr(self, name) >= 1, f"svg0.{name} must be >= 1, got {getattr(self, name)}")
        check(
            len(self.hidden_sizes) >= 1 and all(size >= 1 for size in self.hidden_sizes),
            f"svg0.hidden_sizes must be one or more sizes >= 1, got {self.hidden_sizes}",
        )
        check(
            self.core in CORES,
            f"svg0.core must be one of {', '.join(CORES)}, got {self.core!r}",
        )
        check(
            self.min_replay_size >= 0,
            f"svg0.min_replay_size must be >= 0, got {self.min_replay_size}",
        )


class SVG0State(NamedTuple):
    policy_params: Any
    critic_params: Any
    prior_params: Any  # () without a prior
    target_policy_params: Any
    target_critic_params: Any
    target_prior_params: Any  # () without a prior
    policy_opt_state: Any
    critic_opt_state: Any
    prior_opt_state: Any  # () without a prior
    update_step: jax.Array  # int32


# --------------------------------------------------------------------------- loss pieces


def log_importance_weights(target_log_prob, behaviour_log_prob, mask):
    """``log(rho_t + 1e-20)`` for the actions of steps 0..T-1, ``rho_t = exp(log pi_target -
    log mu)``, and ``rho_t = 0`` on restarts (``mask`` 0).

    Args:
      target_log_prob: ``log pi_target(a_t|s_t)`` [T+1, B].
      behaviour_log_prob: ``log mu(a_t|s_t)`` [T+1, B], recorded when acting.
      mask: [T, B] from ``restart_mask``.

    Returns:
      log importance weights [T, B].
    """
    log_ratio = target_log_prob[:-1] - behaviour_log_prob[:-1]
    rho = jnp.where(mask > 0, jnp.exp(log_ratio), 0.0)
    return jnp.log(rho + MIN_RHO)


def restart_masks(is_first):
    """``ops.restart_mask`` over a batch: is_first [T+1, B] -> mask [T, B]."""
    return jax.vmap(ops.restart_mask, in_axes=1, out_axes=1)(is_first)


def retrace_targets(log_rhos, discounts, rewards, q_values, values, lambda_):
    """Retrace targets [T, B] for sequences of T+1 steps.

    Args:
      log_rhos: [T, B] log importance weights of the actions at steps 0..T-1.
      discounts: [T, B] gamma times the discounts of steps 1..T.
      rewards: [T, B] the rewards of steps 1..T.
      q_values: [T, B] target Q at the actions taken at steps 0..T-1.
      values: [T+1, B] target V (KL-penalised with a prior) at steps 0..T; the last
        row bootstraps.
      lambda_: Retrace's lambda.
    """
    retrace = jax.vmap(
        ops.retrace_from_importance_weights, in_axes=(1, 1, 1, 1, 1, 0, None), out_axes=1
    )
    return retrace(log_rhos, discounts, rewards, q_values, values[:-1], values[-1], lambda_).qs


masked_mean = parallel.masked_mean  # over the whole batch, whichever devices hold it


def critic_loss_from(retrace_qs, online_q, mask):
    """Masked mean of ``0.5 (Q_ret - Q_online)^2``: retrace_qs, online_q, mask [T, B]."""
    return masked_mean(0.5 * (jax.lax.stop_gradient(retrace_qs) - online_q) ** 2, mask)


def policy_loss_from(expected_q, entropy, kl, mask, entropy_cost, distillation_cost):
    """Masked mean of ``-(E[Q] + entropy_cost H) + distillation_cost KL`` over steps 0..T-1:
    expected_q, entropy, kl [T+1, B] (kl = 0 without a prior), mask [T, B]."""
    per_step = -(expected_q + entropy_cost * entropy) + distillation_cost * kl
    return masked_mean(per_step[:-1], mask)


def gaussian_kl(p_params, q_params):
    """KL(p || q) [...] of two tanh-Gaussian policies {mean, log_std} [..., d]: the KL of
    the Gaussians before tanh, which equals the squashed one (tanh is a bijection)."""

    def normal(params):
        return distrax.MultivariateNormalDiag(params["mean"], jnp.exp(params["log_std"]))

    return normal(p_params).kl_divergence(normal(q_params))


def with_exploration_noise(dist_params, noise_std):
    """The behaviour policy: Gaussian noise of std ``noise_std`` added before the tanh, so
    the pre-tanh std becomes sqrt(std^2 + noise_std^2)."""
    if noise_std == 0.0:
        return dist_params
    variance = jnp.exp(2.0 * dist_params["log_std"]) + noise_std**2
    return {"mean": dist_params["mean"], "log_std": 0.5 * jnp.log(variance)}


def sample_with_log_prob(dist_params, key, count):
    """``count`` reparameterised tanh-Gaussian samples per distribution and their log-probs:
    dist_params {mean, log_std} [T, B, d] -> actions [count, T, B, d], log_probs [count,
    T, B]. Each sequence (b) draws from its own key, the same draws however the B
    sequences are split over devices."""
    keys = parallel.example_keys(key, dist_params["mean"].shape[1])

    def one_sequence(params, sequence_key):  # [T, d] -> [count, T, d], [count, T]
        dist = _tanh_gaussian(params)
        return dist.sample_and_log_prob(seed=sequence_key, sample_shape=(count,))

    return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=(2, 2))(dist_params, keys)


def _tanh_gaussian(params):
    normal = distrax.MultivariateNormalDiag(params["mean"], jnp.exp(params["log_std"]))
    return distrax.Transformed(normal, distrax.Block(distrax.Tanh(), ndims=1))


def behaviour_log_prob(experience: Experience):
    """``extras["log_prob"]``, or a clear error when the experience does not carry it."""
    extras = experience.extras
    if not isinstance(extras, dict) or "log_prob" not in extras:
        names = sorted(extras) if isinstance(extras, dict) else []
        raise MissingExtrasError(
            "svg0 needs the behaviour policy's log-probabilities of the actions taken "
            "(extras['log_prob']) for its importance weights; this experience has extras "
            f"{names}: collect it with an agent that records log_prob"
        )
    return extras["log_prob"]


# --------------------------------------------------------------------------- networks


class _Networks(NamedTuple):
    """How SVG0 runs its networks, feed-forward or recurrent (chosen once in make_svg0).

    Policy-shaped networks (policy, prior) and critics, stepped for acting or unrolled over
    [S, B] sequences from start states (``()`` for feed-forward networks):

    init_policy(key) / init_critic(key) -> params
    initial_state(batch_shape) -> a core state (``()`` feed-forward)
    policy_step(params, state, observation [B], first [B]) -> (state, dist params [B])
    critic_step(params, state, observation [B], action [B], first [B]) -> (state, Q [B])
    policy_unroll(params, observation [S, B], first [S, B], start) -> dist params [S, B]
    critic_unroll(params, observation, action, first, start) -> (Q [S, B], states before
      each step [S, B, ...])
    critic_at(params, states [..., S, B], observation, action, first) -> Q [..., S, B]: one
      step from each given state (N sampled actions at once).
    """

    init_policy: Callable
    init_critic: Callable
    initial_state: Callable
    policy_step: Callable
    critic_step: Callable
    policy_unroll: Callable
    critic_unroll: Callable
    critic_at: Callable


def _feed_forward(spec: EnvSpec, config: SVG0Config, observation_size: int) -> _Networks:
    policy = actor_critic.Policy(spec.action, config.hidden_sizes)
    critic = actor_critic.Critic(spec.action, config.hidden_sizes)
    observation = jnp.zeros((1, observation_size), jnp.float32)
    action = jnp.zeros((1, len(spec.action.low)), jnp.float32)

    def policy_step(params, state, observation, first):
        return state, policy.apply(params, observation)

    def critic_step(params, state, observation, action, first):
        return state, critic.apply(params, observation, action)

    def critic_unroll(params, observation, action, first, start):
        return critic.apply(params, observation, action), ()

    return _Networks(
        init_policy=lambda key: policy.init(key, observation),
        init_critic=lambda key: critic.init(key, observation, action),
        initial_state=lambda batch_shape: (),
        policy_step=policy_step,
        critic_step=critic_step,
        policy_unroll=lambda params, observation, first, start: policy.apply(params, observation),
        critic_unroll=critic_unroll,
        critic_at=lambda params, states, observation, action, first: critic.apply(
            params, observation, action
        ),
    )


def _recurrent(spec: EnvSpec, config: SVG0Config, observation_size: int) -> _Networks:
    sizes = dict(hidden_sizes=config.hidden_sizes, core=config.core, core_size=config.core_size)
    policy = recurrent_actor_critic.RecurrentPolicy(spec.action, **sizes)
    critic = recurrent_actor_critic.RecurrentCritic(spec.action, **sizes)
    observation = jnp.zeros((1, observation_size), jnp.float32)
    action = jnp.zeros((1, len(spec.action.low)), jnp.float32)
    first = jnp.ones((1,), bool)

    def initial_state(batch_shape):
        return zero_core_state(config.core, batch_shape, config.core_size)

    def policy_unroll(params, observation, first, start):
        def one_step(state, inputs):
            return policy.apply(params, state, *inputs)

        return jax.lax.scan(one_step, start, (observation, first))[1]

    def critic_unroll(params, observation, action, first, start):
        def one_step(state, inputs):
            next_state, q = critic.apply(params, state, *inputs)
            return next_state, (q, state)

        return jax.lax.scan(one_step, start, (observation, action, first))[1]

    return _Networks(
        init_policy=lambda key: policy.init(key, initial_state(1), observation, first),
        init_critic=lambda key: critic.init(key, initial_state(1), observation, action, first),
        initial_state=initial_state,
        policy_step=policy.apply,
        critic_step=critic.apply,
        policy_unroll=policy_unroll,
        critic_unroll=critic_unroll,
        critic_at=lambda params, states, observation, action, first: critic.apply(
            params, states, observation, action, first
        )[1],
    )


# --------------------------------------------------------------------------- the agent


class _Inputs(NamedTuple):
    """A sampled batch as the losses read it: [S, B] time-major, S = T+1."""

    observation: Any  # [S, B, obs]
    action: Any  # [S, B, d] in [-1, 1]
    first: Any  # bool [S, B]
    mask: Any  # [T, B]: 0 for the restart transitions
    reward: Any  # [S, B]
    discount: Any  # [S, B]
    behaviour_log_prob: Any  # [S, B]
    start: Any  # {"policy", "critic", "prior"}: start states of the unrolls ({} feed-forward)


class Terms(NamedTuple):
    """What one update computes from a batch (for tests and metrics); [T, B] unless noted."""

    log_rhos: Any
    mask: Any
    target_q: Any  # target critic at the taken actions [T+1, B]
    target_v: Any  # target V, KL-penalised with a prior, [T+1, B]
    kl_to_target_prior: Any  # KL(pi_online || prior_target) [T+1, B] (0 without a prior)
    retrace_qs: Any
    online_q: Any


def make_svg0(spec: EnvSpec, config: SVG0Config) -> Agent:
    """The SVG0 agent for ``spec`` (continuous actions)."""
    return _build(spec, config)[0]


def make_terms(spec: EnvSpec, config: SVG0Config) -> Callable:
    """``terms(state, batch [S, B], key) -> Terms``: the intermediates ``update`` computes
    from the same arguments, for states of ``make_svg0(spec, config)`` (tests, debugging)."""
    return _build(spec, config)[1]


def _build(spec: EnvSpec, config: SVG0Config) -> tuple[Agent, Callable]:
    action_spec = spec.action
    if action_spec.is_discrete:
        raise ConfigError(
            "svg0 needs continuous (Box) actions: it differentiates Q through reparameterised "
            "actions; use ppo or crr for discrete action spaces"
        )
    observation_size = math.prod(spec.observation_shape)
    recurrent = config.core != "none"
    networks = (_recurrent if recurrent else _feed_forward)(spec, config, observation_size)
    use_rollout_state = config.use_rollout_state and recurrent
    learning_rates = {
        name: as_schedule(getattr(config, f"{name}_learning_rate"))
        for name in ("policy", "critic", "prior")
    }
    discount = as_schedule(config.discount)
    clip = (
        []
        if math.isinf(config.max_grad_norm)
        else [optax.clip_by_global_norm(config.max_grad_norm)]
    )
    optimizers = {
        name: optax.chain(*clip, optax.adam(rate)) for name, rate in learning_rates.items()
    }
    num_samples = config.num_action_samples

    def flatten(observation):
        return actor_critic.flat_observation(spec.observation_shape, observation)

    def to_env(action):  # [-1, 1] -> the Box
        return actor_critic.to_box(action_spec, action)

    def from_env(action):  # the Box -> [-1, 1]
        return actor_critic.from_box(action_spec, action)

    def init(key) -> SVG0State:
        policy_key, critic_key, prior_key = jax.random.split(key, 3)
        policy_params = networks.init_policy(policy_key)
        critic_params = networks.init_critic(critic_key)
        prior_params = networks.init_policy(prior_key) if config.prior else ()
        return SVG0State(
            policy_params,
            critic_params,
            prior_params,
            policy_params,
            critic_params,
            prior_params,
            optimizers["policy"].init(policy_params),
            optimizers["critic"].init(critic_params),
            optimizers["prior"].init(prior_params) if config.prior else (),
            jnp.zeros((), jnp.int32),
        )

    def initial_carry(batch_size):
        if not recurrent:
            return ()
        names = ("policy", "critic", "prior") if config.prior else ("policy", "critic")
        return {name: networks.initial_state(batch_size) for name in names}

    def act(state: SVG0State, timestep: TimeStep, carry, key, mode="rollout", temperature=1.0):
        observation = flatten(timestep.observation)
        first = timestep.is_first()
        policy_state, dist_params = networks.policy_step(
            state.policy_params, carry["policy"] if recurrent else (), observation, first
        )
        if mode == "predict":
            action = actor_critic.sample(action_spec, dist_params, key, temperature)
            carry = dict(carry, policy=policy_state) if recurrent else carry
            return to_env(action), carry, {}
        if mode != "rollout":
            raise ValueError(f"act mode must be 'rollout' or 'predict', got {mode!r}")
        behaviour = with_exploration_noise(dist_params, config.exploration_noise)
        action = actor_critic.sample(action_spec, behaviour, key)
        log_prob = actor_critic.log_prob(action_spec, behaviour, action)
        if recurrent:
            carry = step_carry(state, carry, policy_state, observation, action, first)
        return to_env(action), carry, {"log_prob": log_prob}

    def step_carry(state: SVG0State, carry, policy_state, observation, action, first):
        """Every network's core state after this step, for training from rollout states."""
        new_carry = {
            "policy": policy_state,
            "critic": networks.critic_step(
                state.critic_params, carry["critic"], observation, action, first
            )[0],
        }
        if config.prior:
            new_carry["prior"] = networks.policy_step(
                state.prior_params, carry["prior"], observation, first
            )[0]
        return new_carry

    def preprocess(state, experience: Experience):
        behaviour_log_prob(experience)  # a clear error before anything is traced further
        return experience

    def inputs_of(batch: Experience) -> _Inputs:
        first = batch.step_type == StepType.FIRST
        batch_size = first.shape[1]
        if use_rollout_state:
            start = jax.tree.map(lambda x: x[0], batch.state)
        else:
            start = initial_carry(batch_size) if recurrent else {}  # feed-forward: none
        return _Inputs(
            observation=flatten(batch.observation),
            action=from_env(batch.action),
            first=first,
            mask=restart_masks(first),
            reward=batch.reward,
            discount=batch.discount,
            behaviour_log_prob=behaviour_log_prob(batch),
            start=start,
        )

    def start_of(inputs: _Inputs, name: str):
        return inputs.start.get(name, ())

    def tiled(x):
        return jnp.broadcast_to(x, (num_samples,) + x.shape)

    def expected_q(critic_params, critic_states, inputs: _Inputs, actions):
        """mean_n Q(s_t, a_n) [S, B] for sampled actions [N, S, B, d]."""
        q = networks.critic_at(
            critic_params,
            jax.tree.map(tiled, critic_states),
            tiled(inputs.observation),
            actions,
            tiled(inputs.first),
        )
        return jnp.mean(q, axis=0)

    def kl_to_target_prior(state: SVG0State, policy_dist, inputs: _Inputs):
        """KL(pi_online || prior_target) [S, B]; exactly 0 without a prior."""
        if not config.prior:
            return jnp.zeros(inputs.first.shape, jnp.float32)
        prior_dist = networks.policy_unroll(
            state.target_prior_params, inputs.observation, inputs.first, start_of(inputs, "prior")
        )
        return gaussian_kl(policy_dist, prior_dist)

    def targets(state: SVG0State, inputs: _Inputs, key, gamma):
        """The Retrace targets and what they are built from (no gradient flows out)."""
        target_dist = networks.policy_unroll(
            state.target_policy_params, inputs.observation, inputs.first, start_of(inputs, "policy")
        )
        target_q, critic_states = networks.critic_unroll(
            state.target_critic_params,
            inputs.observation,
            inputs.action,
            inputs.first,
            start_of(inputs, "critic"),
        )
        samples, _ = sample_with_log_prob(target_dist, key, num_samples)
        target_v = expected_q(state.target_critic_params, critic_states, inputs, samples)
        online_dist = networks.policy_unroll(
            state.policy_params, inputs.observation, inputs.first, start_of(inputs, "policy")
        )
        kl = kl_to_target_prior(state, online_dist, inputs)
        target_v = target_v - config.distillation_cost * kl
        log_rhos = log_importance_weights(
            actor_critic.log_prob(action_spec, target_dist, inputs.action),
            inputs.behaviour_log_prob,
            inputs.mask,
        )
        qs = retrace_targets(
            log_rhos,
            gamma * inputs.discount[1:],
            inputs.reward[1:],
            target_q[:-1],
            target_v,
            config.retrace_lambda,
        )
        partial = Terms(log_rhos, inputs.mask, target_q, target_v, kl, qs, None)
        return jax.lax.stop_gradient((partial, critic_states))

    def critic_loss(critic_params, inputs: _Inputs, retrace_qs):
        online_q, _ = networks.critic_unroll(
            critic_params,
            inputs.observation,
            inputs.action,
            inputs.first,
            start_of(inputs, "critic"),
        )
        loss = critic_loss_from(retrace_qs, online_q[:-1], inputs.mask)
        return loss, online_q[:-1]

    def policy_and_prior_loss(params, state: SVG0State, inputs: _Inputs, critic_states, key):
        """The policy's loss plus the prior's; each gets the gradient of its own part only
        (the prior's loss sees the policy without gradient; the policy's the target prior)."""
        policy_params, prior_params = params
        dist = networks.policy_unroll(
            policy_params, inputs.observation, inputs.first, start_of(inputs, "policy")
        )
        actions, log_probs = sample_with_log_prob(dist, key, num_samples)
        q = expected_q(state.target_critic_params, critic_states, inputs, actions)
        entropy = -jnp.mean(log_probs, axis=0)
        kl = kl_to_target_prior(state, dist, inputs)
        policy_loss = policy_loss_from(
            q, entropy, kl, inputs.mask, config.entropy_cost, config.distillation_cost
        )
        metrics = {
            "loss/policy": policy_loss,
            "svg0/expected_q": masked_mean(q[:-1], inputs.mask),
            "svg0/entropy": masked_mean(entropy[:-1], inputs.mask),
        }
        if not config.prior:
            return policy_loss, metrics
        prior_dist = networks.policy_unroll(
            prior_params, inputs.observation, inputs.first, start_of(inputs, "prior")
        )
        prior_kl = gaussian_kl(jax.lax.stop_gradient(dist), prior_dist)
        prior_loss = masked_mean(prior_kl[:-1], inputs.mask)
        metrics["loss/prior"] = prior_loss
        metrics["svg0/kl_to_target_prior"] = masked_mean(kl[:-1], inputs.mask)
        return policy_loss + prior_loss, metrics

    def terms(state: SVG0State, batch: Experience, key) -> Terms:
        """Every intermediate of ``update`` on ``batch`` [S, B] with ``key`` (for tests)."""
        inputs = inputs_of(batch)
        target_key, _ = jax.random.split(key)
        partial, _ = targets(state, inputs, target_key, discount(state.update_step))
        _, online_q = critic_loss(state.critic_params, inputs, partial.retrace_qs)
        return partial._replace(online_q=online_q)

    def apply(name, grads, opt_state, params):
        updates, opt_state = optimizers[name].update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def update(state: SVG0State, batch: Experience, key):
        """One step of each optimiser on sequences [S, B]; hard target copies on schedule."""
        target_key, policy_key = jax.random.split(key)
        inputs = inputs_of(batch)
        partial, critic_states = targets(state, inputs, target_key, discount(state.update_step))
        (critic_value, _), critic_grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic_params, inputs, partial.retrace_qs
        )
        (policy_grads, prior_grads), policy_metrics = jax.grad(policy_and_prior_loss, has_aux=True)(
            (state.policy_params, state.prior_params), state, inputs, critic_states, policy_key
        )
        metrics = {
            "loss/critic": critic_value,
            **policy_metrics,
            "svg0/rho": masked_mean(jnp.minimum(jnp.exp(partial.log_rhos), 1.0), partial.mask),
            "svg0/target_v": masked_mean(partial.target_v[:-1], partial.mask),
        }
        critic_grads, policy_grads, prior_grads, metrics = parallel.device_mean(
            (critic_grads, policy_grads, prior_grads, metrics)
        )
        critic_params, critic_opt_state = apply(
            "critic", critic_grads, state.critic_opt_state, state.critic_params
        )
        policy_params, policy_opt_state = apply(
            "policy", policy_grads, state.policy_opt_state, state.policy_params
        )
        if config.prior:
            prior_params, prior_opt_state = apply(
                "prior", prior_grads, state.prior_opt_state, state.prior_params
            )
        else:
            prior_params, prior_opt_state = (), ()
        step = state.update_step + 1

        def target(online, old):  # hard copies every target_update_period updates
            return optax.periodic_update(online, old, step, config.target_update_period)

        new_state = SVG0State(
            policy_params,
            critic_params,
            prior_params,
            target(policy_params, state.target_policy_params),
            target(critic_params, state.target_critic_params),
            target(prior_params, state.target_prior_params),
            policy_opt_state,
            critic_opt_state,
            prior_opt_state,
            step,
        )
        metrics["grad_norm/critic"] = optax.tree.norm(critic_grads)
        metrics["grad_norm/policy"] = optax.tree.norm(policy_grads)
        for name, rate in learning_rates.items():
            if not rate.is_constant and (name != "prior" or config.prior):
                metrics[f"schedule/{name}_learning_rate"] = rate(state.update_step)
        return new_state, metrics

    agent = Agent(
        name="svg0",
        config=config,
        spec=spec,
        schedule=replay_schedule(
            "svg0", config, config.sequence_length, recurrent, use_rollout_state
        ),
        init=init,
        initial_carry=initial_carry,
        act=act,
        preprocess=preprocess,
        update=update,
        params=lambda state: state.policy_params,
    )
    return agent, terms
