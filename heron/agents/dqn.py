"""Double DQN with n-step returns (Mnih et al., 2015, https://arxiv.org/abs/1312.5602; van
Hasselt et al., 2016, https://arxiv.org/abs/1509.06461), optionally recurrent as in R2D2
(Kapturowski et al., 2019, https://openreview.net/forum?id=r1lyTjAqYX).

Trained off-policy from the ``uniform`` replay on sequences of ``sequence_length`` steps,
time-major [L, M] in ``update`` (the transition t -> t+1 has the reward and discount of step
t+1, see ``heron/types.py``). After ``burn_in`` steps that only warm a recurrent core, every
transition t with a whole window of ``n_step`` steps inside the sequence is regressed, with
the Huber loss, towards

    G_t = r_t+1 + g d_t+1 r_t+2 + ... + (g d_t+1 ... g d_t+h) Q_target(s_t+h, argmax_a Q(s_t+h, a))

where h = n_step, or fewer when an episode ends inside the window: a termination (discount
0) cuts the return there, a truncation (LAST with discount 1) bootstraps from the value of
the LAST step's own observation. Transitions from a LAST step (the reset, never executed)
carry no loss. Q_target is a copy of the online network updated every
``target_update_period`` updates by ``target <- tau * online + (1 - tau) * target``
(``tau = 1``: hard copies; period 1 and a small tau: Polyak averaging).

Discrete and equal MultiDiscrete actions: one Q head per control, each control regressed
towards its own double-Q target (the independent action branches of Tavakoli et al., 2018,
https://arxiv.org/abs/1711.08946). Collecting is epsilon-greedy, with ``epsilon`` scheduled
over the environment steps collected; evaluation at temperature T samples softmax(Q / T),
T = 0 takes the greedy action.

With a recurrent core the online and target networks unroll over each sequence from its
start state (zeros, or the state recorded when acting under ``use_rollout_state``); the
first ``burn_in`` steps only advance the state (no gradient, no loss).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import rlax

from heron import parallel
from heron.agents import learning
from heron.agents.base import (
    Agent,
    ReplayConfig,
    check_config,
    check_recurrence,
    register,
    warn_zero_start,
)
from heron.configs import ConfigError, check, integer, number, registered, scheduled
from heron.networks import DenseHead, NetworkConfig, make_network
from heron.networks.distributions import GREEDY_BELOW, masked_logits
from heron.specs import EnvSpec
from heron.types import StepType, TimeStep

# Sampled windows only: whole unrolls (cycle_one_time) cut into windows overlapping by one
# step would leave the transitions without a whole n-step window untrained.
SERVED = ("uniform",)


def dqn_network() -> NetworkConfig:
    """SB3's DQN MLP (64, 64) with ReLU."""
    return NetworkConfig(hidden_sizes=(64, 64), activation="relu")


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN hyperparameters (SB3's defaults where the issue does not ask otherwise)."""

    learning_rate: float | str = scheduled(1e-4, 0.0, low_open=True)
    """Adam step size (a number or a schedule over updates)."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1]."""
    n_step: int = integer(3, 1)
    """Rewards summed before bootstrapping (1: one-step Q-learning)."""
    epsilon: float | str = scheduled("linear(1.0, 0.05, 10000)", 0.0, 1.0)
    """Probability of a uniformly random action when collecting, in [0, 1]: a number or a
    schedule over *environment steps* collected (all environments together)."""
    target_update_period: int = integer(1_000, 1)
    """Updates between two target updates."""
    tau: float = number(1.0, 0.0, 1.0, low_open=True)
    """Target update ``target <- tau * online + (1 - tau) * target``, in (0, 1]: 1 copies
    (hard updates), small values with target_update_period 1 average (Polyak)."""
    huber_delta: float = number(1.0, 0.0, low_open=True)
    """Where the Huber loss turns from quadratic to linear, > 0."""
    max_grad_norm: float = number(10.0, 0.0, low_open=True, inf_is_off=True)
    """Global-norm gradient clipping; inf disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer (Trax's policy_and_value_optimizer)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<network>/<path> and vars/<network>/<path>."""
    network: NetworkConfig = dataclasses.field(default_factory=dqn_network)
    """Torso and optional recurrent core of the Q network."""
    use_rollout_state: bool = False
    """Start each training sequence from the core state recorded when acting (R2D2)."""
    burn_in: int = integer(0, 0)
    """Steps at the start of each sequence that only advance a recurrent core (R2D2's
    burn-in), >= 0; 0 without a core."""
    unroll_length: int = integer(1, 1)
    """Environment steps collected per environment per iteration."""
    batch_size: int = integer(64, 1)
    """Sequences per update."""
    sequence_length: int = integer(4, 2)
    """Steps per sampled sequence, >= burn_in + n_step + 1."""
    replay: ReplayConfig = dataclasses.field(default_factory=lambda: ReplayConfig(ratio=0.25))
    """The uniform replay: capacity, warm-up and replay ratio."""

    # options that only change how experience is collected (refused when a run collects none)
    collecting: ClassVar[dict[str, str]] = {
        "epsilon": "is the exploration rate of the epsilon-greedy policy that collects"
    }

    def __post_init__(self):
        check_config(self, "dqn")
        check_recurrence(self, "dqn")
        check(
            self.burn_in == 0 or self.network.recurrent,
            f"dqn.burn_in={self.burn_in} needs a recurrent core (dqn.network.core lstm or "
            "gru): a feed-forward network has no state to warm",
        )
        least = self.burn_in + self.n_step + 1
        check(
            self.sequence_length >= least,
            f"dqn.sequence_length={self.sequence_length} holds no transition with a whole "
            f"{self.n_step}-step window after {self.burn_in} burn-in steps: set "
            f"dqn.sequence_length >= {least} (burn_in + n_step + 1)",
        )


class DQNState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    update_step: jax.Array  # int32: optimiser steps taken
    env_steps: jax.Array  # int32: environment steps collected (epsilon's clock)
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


# --------------------------------------------------------------------------- loss pieces


def double_q_values(q_t_value, q_t_selector):
    """``q_t_value[argmax q_t_selector]`` over the last axis (double Q-learning: the online
    network chooses, the target network values): [..., n] -> [...]."""
    choice = jnp.argmax(q_t_selector, axis=-1)
    return jnp.take_along_axis(q_t_value, choice[..., None], axis=-1)[..., 0]


def n_step_targets(r_t, discount_t, last_t, v_t, n: int):
    """n-step bootstrapped returns for the transitions 0..T-1 of a sequence, cut at episode
    ends (rlax's ``n_step_bootstrapped_returns`` with lambda 0 at LAST steps).

    Args:
      r_t: rewards at steps [1, ..., T].
      discount_t: discounts (gamma x the env's discount) at steps [1, ..., T]; 0 where an
        episode terminated.
      last_t: 1.0 where steps [1, ..., T] are LAST (terminated or truncated), else 0.
      v_t: values to bootstrap from at steps [1, ..., T].
      n: steps summed before bootstrapping; windows running past T are shortened.

    Returns:
      targets [T] of the transitions from steps [0, ..., T-1]: a window reaching a LAST
      step stops there, bootstrapping from its value (times its discount: none after a
      termination).
    """
    return rlax.n_step_bootstrapped_returns(
        r_t, discount_t, v_t, n, lambda_t=1.0 - last_t, stop_target_gradients=True
    )


def epsilon_greedy(key, q_values, epsilon, action_mask=()):
    """Actions [B, k] from Q [B, k, n]: greedy per control, or with probability ``epsilon``
    (one draw per environment) uniformly random in every control; among the legal actions
    only, given ``action_mask`` [B, k, n]."""
    explore_key, action_key = jax.random.split(key)
    batch, controls, n = q_values.shape
    explore = jax.random.uniform(explore_key, (batch, 1)) < epsilon
    if isinstance(action_mask, tuple):
        random = jax.random.randint(action_key, (batch, controls), 0, n)
    else:
        uniform = masked_logits(jnp.zeros_like(q_values), action_mask)
        random = jax.random.categorical(action_key, uniform, axis=-1)
    greedy = jnp.argmax(masked_logits(q_values, action_mask), axis=-1)
    return jnp.where(explore, random, greedy)


def softmax_actions(key, q_values, temperature):
    """Actions [..., k] sampled from softmax(Q / temperature) per control (Q [..., k, n]);
    temperature 0 (below 1e-6) takes the greedy action."""
    temperature = jnp.asarray(temperature, jnp.float32)
    greedy = temperature < GREEDY_BELOW
    sampled = jax.random.categorical(key, q_values / jnp.where(greedy, 1.0, temperature), axis=-1)
    return jnp.where(greedy, jnp.argmax(q_values, axis=-1), sampled)


# --------------------------------------------------------------------------- the agent


def make_dqn(spec: EnvSpec, config: DQNConfig, devices=None) -> Agent:
    action_spec = spec.action
    if not action_spec.is_discrete:
        raise ConfigError(
            "dqn needs discrete actions (Discrete, or MultiDiscrete with equal choices per "
            f"control); this environment's actions are continuous (Box {action_spec.shape}): "
            "use sac, svg0, crr or ppo"
        )
    warn_zero_start(config, "dqn")
    controls_count, n_actions = action_spec.n_controls, action_spec.n_actions
    hyper = learning.Hyperparameters(
        config, ("learning_rate", "discount", "epsilon"), by_env_steps=("epsilon",)
    )
    optimizer = learning.optimizer(config)
    network = make_network(
        config.network,
        DenseHead((controls_count, n_actions), None),
        spec.observation_shape,
        observation_parts=spec.observation_parts,
    )
    burn_in, n_step = config.burn_in, config.n_step

    def as_controls(action):
        """Actions [..., k] whatever the space (a Discrete action gains its control axis)."""
        return action if action_spec.multi_control else action[..., None]

    def masks_as_controls(action_mask):
        """Action masks [..., k, n] whatever the space; () (no masks) stays ()."""
        if isinstance(action_mask, tuple) or action_spec.multi_control:
            return action_mask
        return action_mask[..., None, :]

    def from_controls(action):
        return action if action_spec.multi_control else action[..., 0]

    def init(key) -> DQNState:
        params = network.init(key)
        zero = jnp.zeros((), jnp.int32)
        return DQNState(
            params=params,
            target_params=params,
            opt_state=optimizer.init(params),
            update_step=zero,
            env_steps=zero,
            controls=hyper.initial_controls(),
        )

    def initial_carry(batch_size: int):
        return network.initial_state((batch_size,))

    def act(state: DQNState, timestep: TimeStep, carry, key):
        new_carry, q = network.step(state.params, carry, timestep.observation, timestep.is_first())
        epsilon = hyper("epsilon", state.update_step, state.controls, state.env_steps)
        action = from_controls(
            epsilon_greedy(key, q, epsilon, masks_as_controls(timestep.action_mask))
        )
        return action, new_carry, learning.rollout_extras(config, carry)

    def policy(state: DQNState, timestep: TimeStep, carry, key, temperature):
        new_carry, q = network.step(state.params, carry, timestep.observation, timestep.is_first())
        q = masked_logits(q, masks_as_controls(timestep.action_mask))
        return from_controls(softmax_actions(key, q, temperature)), new_carry

    def observe_steps(state: DQNState, count: int) -> DQNState:
        return state._replace(env_steps=state.env_steps + count)

    def unroll(params, start, observation, first):
        """Q [T, M, k, n] over sequences [T, M] from ``start``."""
        return network.unroll(params, start, observation, first)[1]

    def online_q(params, batch, start):
        """Online Q [L - burn_in, M, k, n] after the burn-in (which takes no gradient)."""
        first = batch.step_type == StepType.FIRST
        if burn_in:
            warm = network.unroll(params, start, batch.observation[:burn_in], first[:burn_in])[0]
            start = jax.lax.stop_gradient(warm)
        return unroll(params, start, batch.observation[burn_in:], first[burn_in:])

    def update(state: DQNState, batch, key):
        """One Adam step on sequences [L, M]; the target network follows on schedule."""
        del key
        step, controls = state.update_step, state.controls
        gamma = hyper("discount", step, controls)
        start = learning.start_state(config, "dqn", batch, initial_carry)
        first = batch.step_type == StepType.FIRST
        after = slice(burn_in + 1, None)  # the steps transitions after the burn-in reach
        q_target = unroll(state.target_params, start, batch.observation, first)[after]
        last = (batch.step_type[after] == StepType.LAST).astype(jnp.float32)  # [T, M]
        discount = gamma * batch.discount[after]
        action = as_controls(batch.action[burn_in:])  # [T + 1, M, k]
        next_mask = jax.tree.map(lambda m: m[after], masks_as_controls(batch.action_mask))
        count = batch.step_type.shape[0] - burn_in - n_step  # transitions with a whole window
        valid = (batch.step_type[burn_in : burn_in + count] != StepType.LAST).astype(jnp.float32)

        def targets_from(q_online):
            """n-step double-Q targets [count, M, k], per control."""
            selector = masked_logits(jax.lax.stop_gradient(q_online[1:]), next_mask)
            v = double_q_values(q_target, selector)  # [T, M, k]: of legal actions only
            returns = jax.vmap(  # over sequences, then controls
                jax.vmap(n_step_targets, in_axes=(None, None, None, 1, None), out_axes=1),
                in_axes=(1, 1, 1, 1, None),
                out_axes=1,
            )(batch.reward[after], discount, last, v, n_step)
            return returns[:count]

        def loss_fn(params):
            q_online = online_q(params, batch, start)  # [T + 1, M, k, n]
            targets = targets_from(q_online)
            q_taken = jnp.take_along_axis(q_online[:count], action[:count, ..., None], -1)[..., 0]
            td = targets - q_taken  # [count, M, k]
            losses = jnp.mean(rlax.huber_loss(td, config.huber_delta), axis=-1)
            loss = parallel.masked_mean(losses, valid)
            return loss, {
                "loss/td": loss,
                "dqn/q": parallel.masked_mean(jnp.mean(q_taken, -1), valid),
                "dqn/abs_td": parallel.masked_mean(jnp.mean(jnp.abs(td), -1), valid),
            }

        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params)
        grads, metrics = parallel.device_mean((grads, metrics))
        params, opt_state = optimizer.step(
            grads, state.opt_state, state.params, hyper("learning_rate", step, controls)
        )
        step_count = step + 1
        new_state = state._replace(
            params=params,
            target_params=learning.target_update(
                params, state.target_params, step_count, config.target_update_period, config.tau
            ),
            opt_state=opt_state,
            update_step=step_count,
        )
        metrics = {
            **metrics,
            **learning.gradient_metrics(config, {"q": (grads, state.params)}),
            **hyper.metrics(step, controls, state.env_steps),
        }
        return new_state, metrics

    return Agent(
        name="dqn",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=initial_carry,
        act=act,
        policy=policy,
        params=lambda state: state.params,
        **learning.off_policy_learning("dqn", config, update, devices, SERVED),
        observe_steps=observe_steps,
    )


register("dqn", DQNConfig, make_dqn, masks_actions=True)
