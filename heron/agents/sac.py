"""Soft Actor-Critic with twin critics and a learned temperature (Haarnoja et al., 2018,
https://arxiv.org/abs/1801.01290 and https://arxiv.org/abs/1812.05905), as
Stable-Baselines3's ``SAC`` and SBX's compute it, trained off-policy from the ``uniform``
replay on sequences of ``sequence_length`` = T+1 steps (time-major [T+1, B] in ``update``;
the transition t -> t+1 uses the reward and discount of step t+1, see ``heron/types.py``):

* critics: ``0.5 sum_i (Q_i(s_t, a_t) - y_t)^2`` with the soft target
  ``y_t = r_{t+1} + gamma d_{t+1} (min_i Q'_i(s_{t+1}, a') - alpha log pi(a'|s_{t+1}))``,
  ``a' ~ pi(.|s_{t+1})`` from the online policy and ``Q'_i`` the Polyak-averaged target
  critics: the minimum of the two keeps the target from following one critic's
  overestimates (Fujimoto et al., 2018, https://arxiv.org/abs/1802.09477);
* policy: ``alpha log pi(a|s_t) - min_i Q_i(s_t, a)``, ``a ~ pi(.|s_t)`` reparameterised
  (tanh-Gaussian), the critics held fixed;
* temperature: ``-log alpha (log pi(a|s_t) + target_entropy)`` (SB3's form, on log alpha),
  which raises alpha while the policy's entropy is below ``target_entropy`` (default
  ``-|A|``, the action dimension) and lowers it above.

The three losses are computed from the same state (the critics' and alpha's values before
this update), each minimised by its own Adam; the target critics follow the online ones by
Polyak averaging (``tau``) every ``target_update_period`` updates. A transition t -> t+1
where step t+1 is FIRST is the environment's reset: every loss term at t is masked out
(``heron.ops.restart_mask``); losses are means over the unmasked transitions.

With a recurrent core (``network.core``), the policy and each critic unroll over the
sequence from zero states or, with ``use_rollout_state``, from the states recorded when
acting; the critics at sampled actions step from the state their unroll on the taken
actions reached (as SVG0 does).

Continuous (Box) actions only: SAC differentiates Q through reparameterised actions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from heron import parallel
from heron.agents import actions, actor_critic, learning
from heron.agents.actions import action_size
from heron.agents.actor_critic import ActorCritic, Sequences, sample_with_log_prob
from heron.agents.base import (
    Agent,
    ReplayConfig,
    check_config,
    check_recurrence,
    register,
    warn_zero_start,
)
from heron.configs import integer, number, registered, scheduled
from heron.networks.network import NetworkConfig
from heron.specs import EnvSpec
from heron.types import Experience, TimeStep

NUM_CRITICS = 2  # twin critics


def sb3_network() -> NetworkConfig:
    """SB3's SAC networks: two ReLU layers of 256 units."""
    return NetworkConfig(hidden_sizes=(256, 256), activation="relu")


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters (Stable-Baselines3's defaults where it has one)."""

    learning_rate: float | str = scheduled(3e-4, 0.0, low_open=True)
    """Adam step size of the policy, the critics and the temperature."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1]."""
    tau: float = number(0.005, 0.0, 1.0, low_open=True)
    """Polyak coefficient of the target critics, in (0, 1]: target += tau (online - target);
    1 is a hard copy."""
    target_update_period: int = integer(1, 1)
    """Updates between two Polyak steps of the target critics."""
    initial_alpha: float = number(1.0, 0.0, low_open=True)
    """The temperature alpha (the entropy's weight) at the start, > 0."""
    learn_alpha: bool = True
    """Learn alpha towards target_entropy; False keeps it at initial_alpha."""
    target_entropy: float | None = number(None, optional=True)
    """The policy entropy alpha is tuned towards; None: -(action dimension)."""
    max_grad_norm: float = number(math.inf, 0.0, low_open=True)
    """Global-norm gradient clipping per network; inf (SB3: none) disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer (Trax's policy_and_value_optimizer)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<network>/<path> and vars/<network>/<path>."""
    network: NetworkConfig = dataclasses.field(default_factory=sb3_network)
    """Torso and core of the policy and of each critic."""
    use_rollout_state: bool = False
    """Start each training sequence from the core states recorded when acting (ALF); the
    target critics start from the same states as their online critics (as R2D2 does)."""
    unroll_length: int = integer(1, 1)
    """Environment steps collected per environment per iteration."""
    batch_size: int = integer(256, 1)
    """Sequences per update (SB3: 256 transitions)."""
    sequence_length: int = integer(2, 2)
    """Steps per sampled training sequence, T+1 >= 2 (T transitions)."""
    replay: ReplayConfig = dataclasses.field(
        default_factory=lambda: ReplayConfig(min_size=1_000, ratio=1.0)
    )
    """The uniform replay: capacity, warm-up and replay ratio (SB3: one update per step)."""

    def __post_init__(self):
        check_config(self, "sac")
        check_recurrence(self, "sac")


class SACState(NamedTuple):
    policy_params: Any
    critic_params: Any  # the twin critics' parameters, stacked [2, ...]
    target_critic_params: Any
    log_alpha: jax.Array  # float32 []
    policy_opt_state: Any
    critic_opt_state: Any
    alpha_opt_state: Any  # () when alpha is not learnt
    update_step: jax.Array  # int32
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


# --------------------------------------------------------------------------- loss pieces


masked_mean = parallel.masked_mean  # over the whole batch, whichever devices hold it


def soft_target(reward_t, discount_t, next_q, next_log_prob, alpha):
    """The soft TD target ``r_t + discount_t (min_i Q'_i - alpha log pi)`` (no gradient).

    Args:
      reward_t: [T, B] the rewards of steps 1..T.
      discount_t: [T, B] gamma times the discounts of steps 1..T.
      next_q: [2, T, B] the target critics at (s_{t+1}, a'), a' ~ pi(.|s_{t+1}).
      next_log_prob: [T, B] log pi(a'|s_{t+1}).
      alpha: the temperature [].
    """
    soft_value = jnp.min(next_q, axis=0) - alpha * next_log_prob
    return jax.lax.stop_gradient(reward_t + discount_t * soft_value)


def critic_loss_from(q_t, target_t, mask):
    """Masked mean over transitions of ``0.5 sum_i (Q_i - y)^2``: q_t [2, T, B], target_t and
    mask [T, B] (SB3: half the sum of the critics' mean squared errors)."""
    per_step = 0.5 * jnp.sum((q_t - jax.lax.stop_gradient(target_t)) ** 2, axis=0)
    return masked_mean(per_step, mask)


def policy_loss_from(q_t, log_prob_t, alpha, mask):
    """Masked mean of ``alpha log pi(a|s) - min_i Q_i(s, a)``: q_t [2, T, B] at the policy's
    reparameterised actions, log_prob_t and mask [T, B], alpha [] (no gradient)."""
    per_step = jax.lax.stop_gradient(alpha) * log_prob_t - jnp.min(q_t, axis=0)
    return masked_mean(per_step, mask)


def alpha_loss_from(log_alpha, log_prob_t, target_entropy, mask):
    """Masked mean of ``-log_alpha (log pi(a|s) + target_entropy)`` (SB3's temperature
    loss): its gradient raises alpha while the entropy ``-log pi`` is below the target."""
    per_step = -log_alpha * jax.lax.stop_gradient(log_prob_t + target_entropy)
    return masked_mean(per_step, mask)


def default_target_entropy(spec: EnvSpec) -> float:
    """SAC's heuristic: minus the action dimension."""
    return -float(action_size(spec.action))


# --------------------------------------------------------------------------- the losses


def networks(spec: EnvSpec, config: SACConfig) -> ActorCritic:
    """The tanh-Gaussian policy and the twin critics on observations (beside actions in
    [-1, 1] for the critics)."""
    return actor_critic.networks(spec, config.network, NUM_CRITICS)


def inputs_of(networks: ActorCritic, config: SACConfig, batch: Experience) -> Sequences:
    """``batch`` [S, B] as the losses read it, from the states recorded when acting under
    ``use_rollout_state``, else from zeros."""
    start = learning.start_state(config, "sac", batch, networks.initial_carry)
    return networks.sequences(batch, start)


def q_at(networks: ActorCritic, params, states, inputs: Sequences, actions, steps: slice):
    """Q of both critics [2, len(steps), B] at ``actions`` [len(steps), B, d] in the states
    of ``steps``."""
    return networks.critics.step(
        params,
        networks.critics.at_steps(states, steps),
        inputs.observation[steps],
        actions,
        inputs.first[steps],
    )[1]


def policy_samples(networks: ActorCritic, policy_params, inputs: Sequences, key):
    """Reparameterised actions [S, B, d] of the policy at every step, and their
    log-probabilities [S, B]. Only steps 0..T-1 (the policy loss's) carry a gradient: a
    feed-forward policy reads the last step (the targets' alone) in a pass without one,
    which spares a backward pass over a B-row slice of the batch."""
    if networks.policy.recurrent:
        outputs = networks.head_outputs(policy_params, inputs)
    else:
        outputs = jax.tree.map(
            lambda with_grad, last: jnp.concatenate([with_grad, last]),
            networks.head_outputs(policy_params, inputs, steps=slice(None, -1)),
            networks.head_outputs(
                jax.lax.stop_gradient(policy_params), inputs, steps=slice(-1, None)
            ),
        )
    actions, log_probs = sample_with_log_prob(outputs, key, 1)
    return actions[0], log_probs[0]


def targets(
    networks: ActorCritic, state: SACState, inputs: Sequences, next_actions, next_log_prob, gamma
):
    """(soft targets [T, B], target critics' Q [2, T, B]) for the sampled next actions
    [T, B, d] and their log-probabilities [T, B], at discount ``gamma``."""
    alpha = jnp.exp(state.log_alpha)
    states = networks.critic_states(state.target_critic_params, inputs)
    next_q = q_at(
        networks, state.target_critic_params, states, inputs, next_actions, slice(1, None)
    )
    target = soft_target(
        inputs.reward[1:], gamma * inputs.discount[1:], next_q, next_log_prob, alpha
    )
    return target, next_q


def critic_loss(critic_params, networks: ActorCritic, inputs: Sequences, target):
    """The critics' loss and, as aux, their Q at the taken actions [2, T, B]."""
    states = networks.critic_states(critic_params, inputs)
    online_q = q_at(networks, critic_params, states, inputs, inputs.action[:-1], slice(None, -1))
    return critic_loss_from(online_q, target, inputs.mask), online_q


def policy_loss(policy_params, networks: ActorCritic, state: SACState, inputs: Sequences, key):
    """The policy's loss and, as aux, its samples' log-probabilities [S, B], the samples
    [S, B, d] and the critics' Q at them [2, T, B]."""
    actions, log_probs = policy_samples(networks, policy_params, inputs, key)
    critic_params = jax.lax.stop_gradient(state.critic_params)
    states = networks.critic_states(critic_params, inputs)
    q = q_at(networks, critic_params, states, inputs, actions[:-1], slice(None, -1))
    alpha = jnp.exp(state.log_alpha)
    loss = policy_loss_from(q, log_probs[:-1], alpha, inputs.mask)
    return loss, (log_probs, actions, q)


# --------------------------------------------------------------------------- the agent


def make_sac(spec: EnvSpec, config: SACConfig, devices=None) -> Agent:
    """The SAC agent for ``spec`` (continuous actions)."""
    actions.require_box(spec.action, "sac", "reparameterised actions")
    warn_zero_start(config, "sac")
    nets = networks(spec, config)
    hyper = learning.Hyperparameters(config, ("discount", "learning_rate"))
    policy_optimizer, critic_optimizer = learning.optimizer(config), learning.optimizer(config)
    alpha_optimizer = learning.Optimizer(optax.scale_by_adam())
    target_entropy = (
        default_target_entropy(spec) if config.target_entropy is None else config.target_entropy
    )

    def init(key) -> SACState:
        policy_key, critic_key = jax.random.split(key)
        policy_params = nets.policy.init(policy_key)
        critic_params = nets.critics.init(critic_key)
        log_alpha = jnp.asarray(math.log(config.initial_alpha), jnp.float32)
        return SACState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_critic_params=critic_params,
            log_alpha=log_alpha,
            policy_opt_state=policy_optimizer.init(policy_params),
            critic_opt_state=critic_optimizer.init(critic_params),
            alpha_opt_state=alpha_optimizer.init(log_alpha) if config.learn_alpha else (),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def act(state: SACState, timestep: TimeStep, carry, key):
        action, log_prob, new_carry = nets.act(
            state.policy_params, state.critic_params, timestep, carry, key
        )
        return action, new_carry, {"log_prob": log_prob, **learning.rollout_extras(config, carry)}

    def policy(state: SACState, timestep: TimeStep, carry, key, temperature):
        return nets.evaluate(state.policy_params, timestep, carry, key, temperature)

    def update(state: SACState, batch: Experience, key):
        """One step of each optimiser on sequences [S, B]; Polyak targets on schedule."""
        inputs = inputs_of(nets, config, batch)
        gamma = hyper("discount", state.update_step, state.controls)
        rate = hyper("learning_rate", state.update_step, state.controls)
        # One policy sample per step serves the policy loss (steps 0..T-1, with gradient) and
        # the next actions of the targets (steps 1..T, without).
        (policy_value, (log_probs, actions, q)), policy_grads = jax.value_and_grad(
            policy_loss, has_aux=True
        )(state.policy_params, nets, state, inputs, key)
        log_probs, actions = jax.lax.stop_gradient((log_probs, actions))
        target, next_q = targets(nets, state, inputs, actions[1:], log_probs[1:], gamma)
        (critic_value, online_q), critic_grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic_params, nets, inputs, target
        )
        alpha_value, alpha_grad = jax.value_and_grad(alpha_loss_from)(
            state.log_alpha, log_probs[:-1], target_entropy, inputs.mask
        )
        mask = inputs.mask
        metrics = {
            "loss/critic": critic_value,
            "loss/policy": policy_value,
            "loss/alpha": alpha_value,
            "sac/alpha": jnp.exp(state.log_alpha),
            "sac/entropy": masked_mean(-log_probs[:-1], mask),
            "sac/q": masked_mean(jnp.mean(online_q, axis=0), mask),
            "sac/q_policy": masked_mean(jnp.min(q, axis=0), mask),
            "sac/target": masked_mean(target, mask),
            "sac/next_q_gap": masked_mean(jnp.abs(next_q[0] - next_q[1]), mask),
        }
        critic_grads, policy_grads, alpha_grad, metrics = parallel.device_mean(
            (critic_grads, policy_grads, alpha_grad, metrics)
        )
        critic_params, critic_opt_state = critic_optimizer.step(
            critic_grads, state.critic_opt_state, state.critic_params, rate
        )
        policy_params, policy_opt_state = policy_optimizer.step(
            policy_grads, state.policy_opt_state, state.policy_params, rate
        )
        if config.learn_alpha:
            log_alpha, alpha_opt_state = alpha_optimizer.step(
                alpha_grad, state.alpha_opt_state, state.log_alpha, rate
            )
        else:
            log_alpha, alpha_opt_state = state.log_alpha, ()
        step = state.update_step + 1
        new_state = SACState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_critic_params=learning.target_update(
                critic_params,
                state.target_critic_params,
                step,
                config.target_update_period,
                config.tau,
            ),
            log_alpha=log_alpha,
            policy_opt_state=policy_opt_state,
            critic_opt_state=critic_opt_state,
            alpha_opt_state=alpha_opt_state,
            update_step=step,
            controls=state.controls,
        )
        metrics.update(
            learning.gradient_metrics(
                config,
                {
                    "critic": (critic_grads, state.critic_params),
                    "policy": (policy_grads, state.policy_params),
                },
            )
        )
        metrics.update(hyper.metrics(state.update_step, state.controls))
        return new_state, metrics

    return Agent(
        name="sac",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=nets.initial_carry,
        act=act,
        policy=policy,
        params=lambda state: state.policy_params,
        **learning.off_policy_learning("sac", config, update, devices),
    )


register("sac", SACConfig, make_sac)

__all__ = [
    "SACConfig",
    "SACState",
    "alpha_loss_from",
    "critic_loss",
    "critic_loss_from",
    "inputs_of",
    "make_sac",
    "networks",
    "policy_loss",
    "policy_loss_from",
    "policy_samples",
    "soft_target",
    "targets",
]
