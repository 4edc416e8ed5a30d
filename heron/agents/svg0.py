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
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from heron import ops, parallel
from heron.agents import actions, actor_critic, learning
from heron.agents.actor_critic import ActorCritic, Sequences, sample_with_log_prob, tanh_gaussian
from heron.agents.base import (
    Agent,
    MissingExtrasError,
    ReplayConfig,
    check_config,
    check_recurrence,
    extra,
    register,
    warn_zero_start,
)
from heron.agents.crr import acme_network
from heron.configs import integer, number, registered, scheduled
from heron.networks.network import NetworkConfig
from heron.specs import EnvSpec
from heron.types import Experience, TimeStep

MIN_RHO = 1e-20  # added to importance weights before the log (Acme's _MIN_LOG_VAL)


@dataclasses.dataclass(frozen=True)
class SVG0Config:
    """SVG0 hyperparameters (Acme's defaults where the issue names them)."""

    policy_learning_rate: float | str = scheduled(1e-4, 0.0, low_open=True)
    """Adam step size of the policy."""
    critic_learning_rate: float | str = scheduled(1e-4, 0.0, low_open=True)
    """Adam step size of the critic."""
    prior_learning_rate: float | str = scheduled(1e-4, 0.0, low_open=True)
    """Adam step size of the prior (with prior=True)."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1]."""
    sequence_length: int = integer(10, 2)
    """Steps per sampled training sequence, T+1 >= 2 (T transitions)."""
    num_action_samples: int = integer(10, 1)
    """Policy samples per state for the target value and for the policy loss."""
    retrace_lambda: float = number(1.0, 0.0, 1.0)
    """Retrace's lambda, in [0, 1]: 0 gives one-step targets, 1 the longest traces."""
    entropy_cost: float = number(1e-3, 0.0)
    """Weight of the sample-based entropy bonus in the policy loss, >= 0."""
    prior: bool = False
    """Learn a behaviour prior and regularise the policy towards it (KL)."""
    distillation_cost: float = number(1e-3, 0.0)
    """Weight of KL(policy || prior) in the policy loss and the value targets, >= 0."""
    target_update_period: int = integer(100, 1)
    """Updates between hard copies into the target networks."""
    max_grad_norm: float = number(math.inf, 0.0, low_open=True)
    """Global-norm gradient clipping per network; inf (Acme: none) disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer (Trax's policy_and_value_optimizer)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<network>/<path> and vars/<network>/<path>."""
    network: NetworkConfig = dataclasses.field(default_factory=acme_network)
    """Torso and core of the policy, the critic and the prior."""
    exploration_noise: float = number(0.0, 0.0)
    """Std of Gaussian noise added to the policy's pre-tanh action when collecting, >= 0;
    the recorded behaviour log-probability includes it."""
    use_rollout_state: bool = False
    """Start each training sequence from the core states recorded when acting (ALF); the
    target networks start from the same states as their online networks (as R2D2 does)."""
    unroll_length: int = integer(1, 1)
    """Environment steps collected per environment per iteration."""
    batch_size: int = integer(256, 1)
    """Sequences per update (Acme's batch size)."""
    replay: ReplayConfig = dataclasses.field(default_factory=lambda: ReplayConfig(min_size=1_000))
    """The uniform replay: capacity, warm-up and replay ratio."""

    # options that only change how experience is collected (refused when a run collects none)
    collecting: ClassVar[dict[str, str]] = {
        "exploration_noise": "widens the policy that collects experience"
    }

    def __post_init__(self):
        check_config(self, "svg0")
        check_recurrence(self, "svg0")


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
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


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


def with_exploration_noise(head_output, noise_std):
    """The behaviour policy: Gaussian noise of std ``noise_std`` added before the tanh, so
    the pre-tanh std becomes sqrt(std^2 + noise_std^2)."""
    if noise_std == 0.0:
        return head_output
    variance = jnp.exp(2.0 * head_output["log_std"]) + noise_std**2
    return {"mean": head_output["mean"], "log_std": 0.5 * jnp.log(variance)}


def behaviour_log_prob(experience: Experience):
    """``extras["log_prob"]``, or a clear error when the experience does not carry it."""
    return extra(
        experience,
        "log_prob",
        "svg0",
        "the behaviour policy's log-probabilities of the actions taken, for its importance "
        "weights: collect it with an agent that records log_prob",
    )


# --------------------------------------------------------------------------- the losses


def networks(spec: EnvSpec, config: SVG0Config) -> ActorCritic:
    """The tanh-Gaussian policy (and prior: another network of its shape) on observations;
    the scalar critic on observations and actions in [-1, 1]."""
    return actor_critic.networks(spec, config.network, None)


def initial_carry(networks: ActorCritic, config: SVG0Config, batch_size: int) -> dict:
    carry = networks.initial_carry(batch_size)
    if config.prior:
        carry["prior"] = networks.policy.initial_state((batch_size,))
    return carry


def inputs_of(networks: ActorCritic, config: SVG0Config, batch: Experience) -> Sequences:
    """``batch`` [S, B] as the losses read it, from the states recorded when acting under
    ``use_rollout_state``, else from zeros."""
    start = learning.start_state(
        config, "svg0", batch, lambda size: initial_carry(networks, config, size)
    )
    return networks.sequences(batch, start)


class Targets(NamedTuple):
    """The Retrace targets and what they are built from; [T, B] unless noted."""

    log_rhos: Any
    target_q: Any  # target critic at the taken actions [T+1, B]
    target_v: Any  # target V, KL-penalised with a prior, [T+1, B]
    kl_to_target_prior: Any  # KL(pi_online || prior_target) [T+1, B] (0 without a prior)
    retrace_qs: Any


def expected_q(networks: ActorCritic, critic_params, critic_states, inputs: Sequences, actions):
    """mean_n Q(s_t, a_n) [S, B] for sampled actions [N, S, B, d]."""
    q = networks.critics.candidates(
        critic_params, critic_states, inputs.observation, inputs.first, actions
    )[1]
    return jnp.mean(q, axis=0)


def kl_to_target_prior(
    networks: ActorCritic, config: SVG0Config, state: SVG0State, head_output, inputs: Sequences
):
    """KL(pi_online || prior_target) [S, B]; exactly 0 without a prior."""
    if not config.prior:
        return jnp.zeros(inputs.first.shape, jnp.float32)
    prior_output = networks.head_outputs(state.target_prior_params, inputs, "prior")
    return tanh_gaussian(head_output).kl(tanh_gaussian(prior_output))


def targets(
    networks: ActorCritic,
    config: SVG0Config,
    state: SVG0State,
    inputs: Sequences,
    behaviour_log_prob,
    key,
    gamma,
):
    """(Targets, the target critic's states before each step) at discount ``gamma``, from
    ``behaviour_log_prob`` [S, B] recorded when acting (no gradient flows out)."""
    target_output = networks.head_outputs(state.target_policy_params, inputs)
    target_q, critic_states = networks.critic_unroll(state.target_critic_params, inputs)
    samples, _ = sample_with_log_prob(target_output, key, config.num_action_samples)
    target_v = expected_q(networks, state.target_critic_params, critic_states, inputs, samples)
    online_output = networks.head_outputs(state.policy_params, inputs)
    kl = kl_to_target_prior(networks, config, state, online_output, inputs)
    target_v = target_v - config.distillation_cost * kl
    log_rhos = log_importance_weights(
        tanh_gaussian(target_output).log_prob(inputs.action), behaviour_log_prob, inputs.mask
    )
    qs = retrace_targets(
        log_rhos,
        gamma * inputs.discount[1:],
        inputs.reward[1:],
        target_q[:-1],
        target_v,
        config.retrace_lambda,
    )
    found = Targets(
        log_rhos=log_rhos,
        target_q=target_q,
        target_v=target_v,
        kl_to_target_prior=kl,
        retrace_qs=qs,
    )
    return jax.lax.stop_gradient((found, critic_states))


def critic_loss(critic_params, networks: ActorCritic, inputs: Sequences, retrace_qs):
    """The critic's loss and, as aux, its Q at the taken actions [T, B]."""
    online_q, _ = networks.critic_unroll(critic_params, inputs)
    loss = critic_loss_from(retrace_qs, online_q[:-1], inputs.mask)
    return loss, online_q[:-1]


def policy_and_prior_loss(
    params,
    networks: ActorCritic,
    config: SVG0Config,
    state: SVG0State,
    inputs: Sequences,
    critic_states,
    key,
):
    """The policy's loss plus the prior's on ``params`` = (policy, prior); each gets the
    gradient of its own part only (the prior's loss sees the policy without gradient; the
    policy's the target prior). Aux: the metrics."""
    policy_params, prior_params = params
    head_output = networks.head_outputs(policy_params, inputs)
    actions, log_probs = sample_with_log_prob(head_output, key, config.num_action_samples)
    q = expected_q(networks, state.target_critic_params, critic_states, inputs, actions)
    entropy = -jnp.mean(log_probs, axis=0)
    kl = kl_to_target_prior(networks, config, state, head_output, inputs)
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
    prior_output = networks.head_outputs(prior_params, inputs, "prior")
    prior_kl = tanh_gaussian(jax.lax.stop_gradient(head_output)).kl(tanh_gaussian(prior_output))
    prior_loss = masked_mean(prior_kl[:-1], inputs.mask)
    metrics["loss/prior"] = prior_loss
    metrics["svg0/kl_to_target_prior"] = masked_mean(kl[:-1], inputs.mask)
    return policy_loss + prior_loss, metrics


# --------------------------------------------------------------------------- the agent


def make_svg0(spec: EnvSpec, config: SVG0Config, devices=None) -> Agent:
    """The SVG0 agent for ``spec`` (continuous actions)."""
    actions.require_box(spec.action, "svg0", "reparameterised actions")
    warn_zero_start(config, "svg0")
    nets = networks(spec, config)
    names = ("policy", "critic", "prior") if config.prior else ("policy", "critic")
    hyper = learning.Hyperparameters(
        config, ("discount", *(f"{name}_learning_rate" for name in names))
    )
    optimizers = {name: learning.optimizer(config) for name in names}

    def init(key) -> SVG0State:
        policy_key, critic_key, prior_key = jax.random.split(key, 3)
        policy_params = nets.policy.init(policy_key)
        critic_params = nets.critics.init(critic_key)
        prior_params = nets.policy.init(prior_key) if config.prior else ()
        return SVG0State(
            policy_params=policy_params,
            critic_params=critic_params,
            prior_params=prior_params,
            target_policy_params=policy_params,
            target_critic_params=critic_params,
            target_prior_params=prior_params,
            policy_opt_state=optimizers["policy"].init(policy_params),
            critic_opt_state=optimizers["critic"].init(critic_params),
            prior_opt_state=optimizers["prior"].init(prior_params) if config.prior else (),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def behaviour(head_output):
        return tanh_gaussian(with_exploration_noise(head_output, config.exploration_noise))

    def act(state: SVG0State, timestep: TimeStep, carry, key):
        action, log_prob, new_carry = nets.act(
            state.policy_params, state.critic_params, timestep, carry, key, behaviour
        )
        if config.prior:
            observation, first = timestep.observation, timestep.is_first()
            new_carry["prior"] = nets.policy.step(
                state.prior_params, carry["prior"], observation, first
            )[0]
        return action, new_carry, {"log_prob": log_prob, **learning.rollout_extras(config, carry)}

    def policy(state: SVG0State, timestep: TimeStep, carry, key, temperature):
        return nets.evaluate(state.policy_params, timestep, carry, key, temperature)

    def step(name: str, grads, opt_state, params, state: SVG0State):
        rate = hyper(f"{name}_learning_rate", state.update_step, state.controls)
        return optimizers[name].step(grads, opt_state, params, rate)

    def update(state: SVG0State, batch: Experience, key):
        """One step of each optimiser on sequences [S, B]; hard target copies on schedule."""
        target_key, policy_key = jax.random.split(key)
        inputs = inputs_of(nets, config, batch)
        gamma = hyper("discount", state.update_step, state.controls)
        found, critic_states = targets(
            nets, config, state, inputs, behaviour_log_prob(batch), target_key, gamma
        )
        (critic_value, _), critic_grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic_params, nets, inputs, found.retrace_qs
        )
        (policy_grads, prior_grads), policy_metrics = jax.grad(policy_and_prior_loss, has_aux=True)(
            (state.policy_params, state.prior_params),
            nets,
            config,
            state,
            inputs,
            critic_states,
            policy_key,
        )
        metrics = {
            "loss/critic": critic_value,
            **policy_metrics,
            "svg0/rho": masked_mean(jnp.minimum(jnp.exp(found.log_rhos), 1.0), inputs.mask),
            "svg0/target_v": masked_mean(found.target_v[:-1], inputs.mask),
        }
        critic_grads, policy_grads, prior_grads, metrics = parallel.device_mean(
            (critic_grads, policy_grads, prior_grads, metrics)
        )
        critic_params, critic_opt_state = step(
            "critic", critic_grads, state.critic_opt_state, state.critic_params, state
        )
        policy_params, policy_opt_state = step(
            "policy", policy_grads, state.policy_opt_state, state.policy_params, state
        )
        if config.prior:
            prior_params, prior_opt_state = step(
                "prior", prior_grads, state.prior_opt_state, state.prior_params, state
            )
        else:
            prior_params, prior_opt_state = (), ()
        updates = state.update_step + 1

        def target(online, old):  # hard copies after updates P, 2P, ...
            return learning.target_update(online, old, updates, config.target_update_period)

        new_state = SVG0State(
            policy_params=policy_params,
            critic_params=critic_params,
            prior_params=prior_params,
            target_policy_params=target(policy_params, state.target_policy_params),
            target_critic_params=target(critic_params, state.target_critic_params),
            target_prior_params=target(prior_params, state.target_prior_params),
            policy_opt_state=policy_opt_state,
            critic_opt_state=critic_opt_state,
            prior_opt_state=prior_opt_state,
            update_step=updates,
            controls=state.controls,
        )
        metrics.update(
            learning.gradient_metrics(
                config,
                {
                    "critic": (critic_grads, state.critic_params),
                    "policy": (policy_grads, state.policy_params),
                    **({"prior": (prior_grads, state.prior_params)} if config.prior else {}),
                },
            )
        )
        metrics.update(hyper.metrics(state.update_step, state.controls))
        return new_state, metrics

    return Agent(
        name="svg0",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=lambda batch_size: initial_carry(nets, config, batch_size),
        act=act,
        policy=policy,
        params=lambda state: state.policy_params,
        **learning.off_policy_learning("svg0", config, update, devices),
    )


register("svg0", SVG0Config, make_svg0)

__all__ = [
    "MissingExtrasError",
    "SVG0Config",
    "SVG0State",
    "Targets",
    "critic_loss",
    "inputs_of",
    "make_svg0",
    "networks",
    "policy_and_prior_loss",
    "targets",
]
