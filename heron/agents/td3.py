"""Twin Delayed DDPG (TD3; Fujimoto et al., 2018, https://arxiv.org/abs/1802.09477), as
Stable-Baselines3's ``TD3`` computes it, trained off-policy from the ``uniform`` replay on
sequences of ``sequence_length`` = T+1 steps (time-major [T+1, B] in ``update``; the
transition t -> t+1 uses the reward and discount of step t+1, see ``heron/types.py``):

* critics: ``0.5 sum_i (Q_i(s_t, a_t) - y_t)^2`` (SAC's critic loss, ``sac.critic_loss``;
  SB3 sums the critics' squared errors without the half, which changes no Adam step but
  for its epsilon) with the clipped double-Q target
  ``y_t = r_{t+1} + gamma d_{t+1} min_i Q'_i(s_{t+1}, a')``,
  ``a' = clip(pi'(s_{t+1}) + clip(eps, -c, c), -1, 1)``, ``eps ~ N(0, sigma^2)``: the
  target policy smoothed by noise of std ``target_policy_noise`` (sigma) clipped to
  ``target_noise_clip`` (c), all in the actions squashed to [-1, 1] (SB3's normalised
  action space, so the noise scales with the Box); ``pi'`` and ``Q'_i`` are the
  Polyak-averaged target policy and critics;
* policy: deterministic, ``pi(s) = tanh(head(s))`` in [-1, 1]^d scaled to the Box; its
  loss is ``-Q_1(s_t, pi(s_t))``, the first critic's alone, after the critics' step of the
  same update (as SB3's), the critics held fixed.

The critics take an Adam step at every update; the policy takes its own, and the target
policy and critics move by ``tau`` towards the online ones, only every ``policy_delay``
updates (after updates P, 2P, ...; SB3's ``_n_updates % policy_delay == 0``). The policy's
gradient is computed at the delayed updates only (a branch: the seeds of a run update in
lockstep), and its metrics (``loss/policy``, ``td3/q_policy``, ``grad_norm/policy``) count
P times there and 0 at the others, so their mean over whole periods is their mean where
computed. A transition
t -> t+1 where step t+1 is FIRST is the environment's reset: every loss term at t is masked
out (``heron.ops.restart_mask``); losses are means over the unmasked transitions. A LAST
step's discount is 0 where the episode terminated and 1 where it was truncated, so a
truncated transition bootstraps from the LAST step's own observation.

Collecting adds Gaussian noise of std ``exploration_noise`` to the policy's action in
[-1, 1]^d (clipped back into it); evaluating at temperature T adds T times that noise, and
T = 0 is the deterministic policy. Until its first update (while the replay holds fewer
than ``replay.min_size`` steps) it collects uniformly random actions instead, as SB3 does
for its ``learning_starts`` steps: the untrained policy with small noise would fill the
replay with actions near one point (on HalfCheetah-v5 it then stayed at a return of -600).

With a recurrent core (``network.core``), the policy and each critic unroll over the
sequence from zero states or, with ``use_rollout_state``, from the states recorded when
acting; the target networks start from the same states as their online ones, and the
critics at other actions (the policy's, the smoothed target actions) step from the state
their unroll on the taken actions reached, as SAC's do.

Continuous (Box) actions only: TD3 differentiates Q through the policy's actions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax

from heron import parallel
from heron.agents import actions, actor_critic, learning
from heron.agents.actions import action_size
from heron.agents.actor_critic import ActorCritic, Sequences
from heron.agents.base import (
    Agent,
    ReplayConfig,
    check_config,
    check_recurrence,
    register,
    warn_zero_start,
)
from heron.agents.sac import critic_loss, q_at
from heron.configs import integer, number, registered, scheduled
from heron.networks import DenseHead
from heron.networks.network import NetworkConfig
from heron.specs import EnvSpec
from heron.types import Experience, TimeStep

NUM_CRITICS = 2  # twin critics
POLICY_HEAD_SCALE = 0.01  # orthogonal init of the policy's last layer: actions start near 0

masked_mean = parallel.masked_mean  # over the whole batch, whichever devices hold it


def sb3_network() -> NetworkConfig:
    """SB3's TD3 networks: ReLU layers of 400 and 300 units."""
    return NetworkConfig(hidden_sizes=(400, 300), activation="relu")


@dataclasses.dataclass(frozen=True)
class TD3Config:
    """TD3 hyperparameters (Stable-Baselines3's defaults where it has one)."""

    learning_rate: float | str = scheduled(1e-3, 0.0, low_open=True)
    """Adam step size of the policy and the critics."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1]."""
    tau: float = number(0.005, 0.0, 1.0, low_open=True)
    """Polyak coefficient of the target policy and critics, in (0, 1]: target += tau
    (online - target); 1 is a hard copy."""
    policy_delay: int = integer(2, 1)
    """Critic updates per update of the policy and of the targets (after updates P, 2P, ...)."""
    target_policy_noise: float = number(0.2, 0.0)
    """Std of the Gaussian noise that smooths the target policy's actions, in the actions
    squashed to [-1, 1], >= 0."""
    target_noise_clip: float = number(0.5, 0.0)
    """That noise is clipped to [-target_noise_clip, target_noise_clip], >= 0."""
    exploration_noise: float = number(0.1, 0.0)
    """Std of the Gaussian noise added to the policy's action (squashed to [-1, 1]) when
    collecting, >= 0; evaluating at temperature T adds T times it."""
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
    target networks start from the same states as their online networks (as R2D2 does)."""
    unroll_length: int = integer(1, 1)
    """Environment steps collected per environment per iteration."""
    batch_size: int = integer(256, 1)
    """Sequences per update (SB3: 256 transitions)."""
    sequence_length: int = integer(2, 2)
    """Steps per sampled training sequence, T+1 >= 2 (T transitions)."""
    replay: ReplayConfig = dataclasses.field(
        default_factory=lambda: ReplayConfig(min_size=100, ratio=1.0)
    )
    """The uniform replay: capacity, warm-up (SB3's learning_starts: 100) and replay ratio
    (SB3: one update per step)."""

    # options that only change how experience is collected (refused when a run collects none)
    collecting: ClassVar[dict[str, str]] = {
        "exploration_noise": "is the noise of the policy that collects experience"
    }

    def __post_init__(self):
        check_config(self, "td3")
        check_recurrence(self, "td3")


class TD3State(NamedTuple):
    policy_params: Any
    critic_params: Any  # the twin critics' parameters, stacked [2, ...]
    target_policy_params: Any
    target_critic_params: Any
    policy_opt_state: Any
    critic_opt_state: Any
    update_step: jax.Array  # int32: critic updates so far
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


# --------------------------------------------------------------------------- loss pieces


def with_noise(action, key, std, clip=None):
    """``action`` [..., d] in [-1, 1] plus Gaussian noise of std ``std`` (clipped to
    [-clip, clip] when given), clipped back into [-1, 1]."""
    noise = std * jax.random.normal(key, action.shape)
    if clip is not None:
        noise = jnp.clip(noise, -clip, clip)
    return jnp.clip(action + noise, -1.0, 1.0)


def smoothed(target_actions, key, noise, noise_clip):
    """TD3's target policy smoothing of the target policy's actions [T, B, d]: each
    sequence (b) draws its noise [T, d] from its own key (``parallel.example_keys``), the
    same draws however the B sequences are split over devices."""
    keys = parallel.example_keys(key, target_actions.shape[1])

    def one_sequence(actions, sequence_key):
        return with_noise(actions, sequence_key, noise, noise_clip)

    return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=1)(target_actions, keys)


def clipped_double_q_target(reward_t, discount_t, next_q):
    """The TD target ``r_t + discount_t min_i Q'_i`` (no gradient).

    Args:
      reward_t: [T, B] the rewards of steps 1..T.
      discount_t: [T, B] gamma times the discounts of steps 1..T.
      next_q: [2, T, B] the target critics at (s_{t+1}, a'), a' the smoothed target action.
    """
    return jax.lax.stop_gradient(reward_t + discount_t * jnp.min(next_q, axis=0))


# --------------------------------------------------------------------------- the losses


def networks(spec: EnvSpec, config: TD3Config) -> ActorCritic:
    """The deterministic policy (its head: pre-tanh actions [..., d]) and the twin critics
    on observations as the torso reads them (beside actions in [-1, 1] for the critics)."""
    head = DenseHead((action_size(spec.action),), POLICY_HEAD_SCALE)
    return actor_critic.networks(spec, config.network, NUM_CRITICS, head)


def inputs_of(networks: ActorCritic, config: TD3Config, batch: Experience) -> Sequences:
    """``batch`` [S, B] as the losses read it, from the states recorded when acting under
    ``use_rollout_state``, else from zeros."""
    start = learning.start_state(config, "td3", batch, networks.initial_carry)
    return networks.sequences(batch, start)


def policy_actions(
    networks: ActorCritic, policy_params, inputs: Sequences, steps: slice = slice(None)
):
    """The deterministic policy's actions [len(steps), B, d] in [-1, 1] at ``steps``."""
    return jnp.tanh(networks.head_outputs(policy_params, inputs, steps=steps))


def targets(
    networks: ActorCritic, config: TD3Config, state: TD3State, inputs: Sequences, key, gamma
):
    """(TD targets [T, B], target critics' Q [2, T, B]) at discount ``gamma``: the target
    critics at the target policy's actions at steps 1..T, smoothed by noise drawn from
    ``key``."""
    next_actions = policy_actions(networks, state.target_policy_params, inputs, slice(1, None))
    next_actions = smoothed(next_actions, key, config.target_policy_noise, config.target_noise_clip)
    states = networks.critic_states(state.target_critic_params, inputs)
    next_q = q_at(
        networks, state.target_critic_params, states, inputs, next_actions, slice(1, None)
    )
    target = clipped_double_q_target(inputs.reward[1:], gamma * inputs.discount[1:], next_q)
    return target, jax.lax.stop_gradient(next_q)


def policy_loss(policy_params, networks: ActorCritic, state: TD3State, inputs: Sequences):
    """Masked mean of ``-Q_1(s_t, pi(s_t))`` over steps 0..T-1 and, as aux, the first
    critic's Q there [T, B]."""
    steps = slice(None, -1)
    actions = policy_actions(networks, policy_params, inputs, steps)
    critic_params = jax.lax.stop_gradient(state.critic_params)
    states = networks.critic_states(critic_params, inputs)
    q = q_at(networks, critic_params, states, inputs, actions, steps)[0]
    return masked_mean(-q, inputs.mask), q


# --------------------------------------------------------------------------- the agent


def make_td3(spec: EnvSpec, config: TD3Config, devices=None) -> Agent:
    """The TD3 agent for ``spec`` (continuous actions)."""
    actions.require_box(spec.action, "td3", "the policy's actions")
    warn_zero_start(config, "td3")
    nets = networks(spec, config)
    hyper = learning.Hyperparameters(config, ("discount", "learning_rate"))
    policy_optimizer, critic_optimizer = learning.optimizer(config), learning.optimizer(config)

    def init(key) -> TD3State:
        policy_key, critic_key = jax.random.split(key)
        policy_params = nets.policy.init(policy_key)
        critic_params = nets.critics.init(critic_key)
        return TD3State(
            policy_params=policy_params,
            critic_params=critic_params,
            target_policy_params=policy_params,
            target_critic_params=critic_params,
            policy_opt_state=policy_optimizer.init(policy_params),
            critic_opt_state=critic_optimizer.init(critic_params),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def act(state: TD3State, timestep: TimeStep, carry, key):
        noise_key, uniform_key = jax.random.split(key)

        def explore(head_output):
            noisy = with_noise(jnp.tanh(head_output), noise_key, config.exploration_noise)
            uniform = jax.random.uniform(uniform_key, noisy.shape, noisy.dtype, -1.0, 1.0)
            return jnp.where(state.update_step == 0, uniform, noisy), ()

        action, _, new_carry = nets.act_with(
            state.policy_params, state.critic_params, timestep, carry, explore
        )
        return action, new_carry, learning.rollout_extras(config, carry)

    def policy(state: TD3State, timestep: TimeStep, carry, key, temperature):
        """The deterministic action at temperature 0; at T > 0, plus Gaussian noise of std
        T * exploration_noise (in [-1, 1]^d, clipped back into it)."""

        def noisy(head_output):
            return with_noise(jnp.tanh(head_output), key, temperature * config.exploration_noise)

        return nets.evaluate_with(state.policy_params, timestep, carry, noisy)

    @jax.jit  # traced once for the delayed branch and the other's shapes
    def policy_step(state: TD3State, inputs: Sequences, rate):
        """The delayed update, after the critics' step: the policy's Adam step against the
        stepped critics, and the Polyak targets; with the policy's metrics."""
        (policy_value, q_policy), policy_grads = jax.value_and_grad(policy_loss, has_aux=True)(
            state.policy_params, nets, state, inputs
        )
        metrics = {"loss/policy": policy_value, "td3/q_policy": masked_mean(q_policy, inputs.mask)}
        policy_grads, metrics = parallel.device_mean((policy_grads, metrics))
        policy_params, policy_opt_state = policy_optimizer.step(
            policy_grads, state.policy_opt_state, state.policy_params, rate
        )
        moved = state._replace(
            policy_params=policy_params,
            policy_opt_state=policy_opt_state,
            target_policy_params=optax.incremental_update(
                policy_params, state.target_policy_params, config.tau
            ),
            target_critic_params=optax.incremental_update(
                state.critic_params, state.target_critic_params, config.tau
            ),
        )
        metrics.update(
            learning.gradient_metrics(config, {"policy": (policy_grads, state.policy_params)})
        )
        return moved, metrics

    def update(state: TD3State, batch: Experience, key):
        """One critic step on sequences [S, B]; every policy_delay-th update also a policy
        step and Polyak targets."""
        inputs = inputs_of(nets, config, batch)
        gamma = hyper("discount", state.update_step, state.controls)
        rate = hyper("learning_rate", state.update_step, state.controls)
        target, next_q = targets(nets, config, state, inputs, key, gamma)
        (critic_value, online_q), critic_grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic_params, nets, inputs, target
        )
        mask = inputs.mask
        metrics = {
            "loss/critic": critic_value,
            "td3/q": masked_mean(jnp.mean(online_q, axis=0), mask),
            "td3/target": masked_mean(target, mask),
            "td3/next_q_gap": masked_mean(jnp.abs(next_q[0] - next_q[1]), mask),
        }
        critic_grads, metrics = parallel.device_mean((critic_grads, metrics))
        critic_params, critic_opt_state = critic_optimizer.step(
            critic_grads, state.critic_opt_state, state.critic_params, rate
        )
        metrics.update(
            learning.gradient_metrics(config, {"critic": (critic_grads, state.critic_params)})
        )
        metrics.update(hyper.metrics(state.update_step, state.controls))
        step = state.update_step + 1
        stepped = state._replace(
            critic_params=critic_params, critic_opt_state=critic_opt_state, update_step=step
        )

        def delayed(state):
            moved, policy_metrics = policy_step(state, inputs, rate)
            # Counted policy_delay times at the delayed updates and not at the others, the
            # policy's metrics average over whole periods to their mean at the updates
            # that compute them.
            return moved, jax.tree.map(lambda m: m * config.policy_delay, policy_metrics)

        def not_yet(state):
            shapes = jax.eval_shape(policy_step, state, inputs, rate)[1]
            return state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        # The seeds update in lockstep: a branch, not a select of both.
        due = parallel.same_for_all_seeds(step) % config.policy_delay == 0
        new_state, policy_metrics = jax.lax.cond(due, delayed, not_yet, stepped)
        metrics.update(policy_metrics)
        return new_state, metrics

    return Agent(
        name="td3",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=nets.initial_carry,
        act=act,
        policy=policy,
        params=lambda state: state.policy_params,
        **learning.off_policy_learning("td3", config, update, devices),
    )


register("td3", TD3Config, make_td3)

__all__ = [
    "TD3Config",
    "TD3State",
    "clipped_double_q_target",
    "inputs_of",
    "make_td3",
    "networks",
    "policy_actions",
    "policy_loss",
    "smoothed",
    "targets",
    "with_noise",
]
