"""Proximal Policy Optimisation (Schulman et al., 2017, https://arxiv.org/abs/1707.06347).

The Trax PPO trainer's loss in heron's agent contract: GAE(gamma, lambda) advantages in
``preprocess``; a clipped surrogate, a value loss weighted by ``value_weight`` and an
entropy bonus weighted by ``entropy_weight`` in ``update``; ``n_optimizer_steps`` passes
over mini-batches of ``optimizer_batch_size`` steps, stopped early once the approximate KL
to the behaviour policy exceeds 1.5 × ``target_kl``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from heron import ops, parallel
from heron.agents.base import Agent, TrainSchedule, check, check_scheduled
from heron.networks import PolicyValueNet, action_distribution, sample_action
from heron.networks.policy_value import ACTIVATIONS
from heron.networks.recurrent import CORES, RecurrentPolicyValueNet
from heron.schedules import as_schedule
from heron.specs import EnvSpec
from heron.types import Experience, StepType, TimeStep

# Fields that accept a schedule (see heron.schedules), with their allowed ranges:
# (name, low, high, low inclusive). Schedules run over the optimiser-step counter.
SCHEDULED_RANGES = (
    ("learning_rate", 0.0, math.inf, False),
    ("gamma", 0.0, 1.0, True),
    ("gae_lambda", 0.0, 1.0, True),
    ("epsilon", 0.0, math.inf, False),
    ("value_weight", 0.0, math.inf, True),
    ("entropy_weight", 0.0, math.inf, True),
)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters. Defaults solve CartPole-v1 in under 100k steps."""

    learning_rate: float | str = 2e-3
    """Adam step size."""
    gamma: float | str = 0.99
    """Reward discount factor, in [0, 1]."""
    gae_lambda: float | str = 0.95
    """GAE mixing parameter lambda, in [0, 1]."""
    epsilon: float | str = 0.2
    """Clipping range of the probability ratio, > 0."""
    value_weight: float | str = 0.5
    """Weight of the value loss, >= 0."""
    entropy_weight: float | str = 0.01
    """Weight of the entropy bonus, >= 0."""
    normalize_advantages: bool = True
    """Normalise advantages to zero mean and unit std within each mini-batch."""
    max_grad_norm: float = 0.5
    """Global-norm gradient clipping; inf disables it."""
    unroll_length: int = 32
    """Environment steps collected per environment per iteration."""
    n_optimizer_steps: int = 4
    """Passes (epochs) over each iteration's batch."""
    optimizer_batch_size: int = 256
    """Steps per mini-batch; must divide num_envs x unroll_length."""
    target_kl: float = math.inf
    """Stop an iteration's passes once approximate KL exceeds 1.5 x target_kl; inf disables."""
    two_towers: bool = True
    """Separate policy and value torsos; False shares one torso (Trax's two_towers)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of each torso."""
    core: Literal["none", "lstm", "gru"] = "none"
    """Recurrent core after the torso; its state resets where episodes start."""
    core_size: int = 64
    """Units of the recurrent core."""
    mini_batch_length: int = 1
    """Steps per training sequence (recurrent cores learn over sequences)."""
    use_rollout_state: bool = False
    """Start each training sequence from the core state recorded when acting (ALF)."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Hidden activation."""

    def __post_init__(self):
        for name, low, high, low_inclusive in SCHEDULED_RANGES:
            check_scheduled(f"ppo.{name}", getattr(self, name), low, high, low_inclusive)
        check(self.max_grad_norm > 0, f"ppo.max_grad_norm must be > 0, got {self.max_grad_norm}")
        check(self.unroll_length >= 1, f"ppo.unroll_length must be >= 1, got {self.unroll_length}")
        check(
            self.n_optimizer_steps >= 1,
            f"ppo.n_optimizer_steps must be >= 1, got {self.n_optimizer_steps}",
        )
        check(
            self.optimizer_batch_size >= 1,
            f"ppo.optimizer_batch_size must be >= 1, got {self.optimizer_batch_size}",
        )
        check(self.target_kl > 0, f"ppo.target_kl must be > 0 (inf disables), got {self.target_kl}")
        check(
            len(self.hidden_sizes) >= 1 and all(h >= 1 for h in self.hidden_sizes),
            f"ppo.hidden_sizes must be positive layer sizes, got {self.hidden_sizes}",
        )
        check(
            self.core in ("none", *CORES),
            f"ppo.core must be one of none, {', '.join(CORES)}, got {self.core!r}",
        )
        check(self.core_size >= 1, f"ppo.core_size must be >= 1, got {self.core_size}")
        check(
            self.mini_batch_length >= 1,
            f"ppo.mini_batch_length must be >= 1, got {self.mini_batch_length}",
        )
        check(
            self.optimizer_batch_size % self.mini_batch_length == 0,
            f"ppo.optimizer_batch_size={self.optimizer_batch_size} must be a multiple of "
            f"ppo.mini_batch_length={self.mini_batch_length} (whole sequences per mini-batch)",
        )
        check(
            self.activation in ACTIVATIONS,
            f"ppo.activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}",
        )


class PPOState(NamedTuple):
    params: Any
    opt_state: Any
    update_step: jax.Array  # int32: optimiser steps taken


class PPOBatch(NamedTuple):
    """Per-step training inputs; [B, T] from preprocess, [L, M] inside update."""

    observation: Any
    action: Any
    log_prob: jax.Array  # behaviour log pi(a|s)
    advantage: jax.Array
    value_target: jax.Array
    mask: jax.Array  # 0 at LAST steps, whose action was never executed
    first: jax.Array  # bool: FIRST steps, where a recurrent core resets
    rollout_state: Any = ()  # the core state recorded before acting, under use_rollout_state


_masked_mean = parallel.masked_mean


def _normalize(advantage, mask):
    """Standardised over the whole mini-batch (all devices' shares of it)."""
    mean = parallel.device_mean(_masked_mean(advantage, mask))
    std = jnp.sqrt(parallel.device_mean(_masked_mean((advantage - mean) ** 2, mask)))
    return (advantage - mean) / (std + 1e-8)


class _Network(NamedTuple):
    """How PPO runs its network, feed-forward or recurrent (chosen once in make_ppo).

    step: (params, carry, timestep [B]) -> (carry, (dist_params, value)), for acting.
    sequence: (params, batch [L, M]) -> (dist_params, value) [L, M], for training.
    """

    init: Any
    initial_carry: Any
    step: Any
    sequence: Any


def _feed_forward(spec: EnvSpec, config: PPOConfig) -> _Network:
    network = PolicyValueNet(
        spec=spec.action,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        two_towers=config.two_towers,
        observation_ndim=len(spec.observation_shape),
    )

    def init(key):
        return network.init(key, jnp.zeros((1,) + spec.observation_shape, jnp.float32))

    def step(params, carry, timestep):
        return carry, network.apply(params, timestep.observation)

    def sequence(params, batch):
        return network.apply(params, batch.observation)

    return _Network(init, lambda batch_size: (), step, sequence)


def _recurrent(spec: EnvSpec, config: PPOConfig) -> _Network:
    network = RecurrentPolicyValueNet(
        spec=spec.action,
        core=config.core,
        core_size=config.core_size,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        two_towers=config.two_towers,
        observation_ndim=len(spec.observation_shape),
    )

    def init(key):
        observation = jnp.zeros((1,) + spec.observation_shape, jnp.float32)
        return network.init(key, network.initial_state(1), observation, jnp.ones(1, bool))

    def step(params, carry, timestep):
        return network.apply(params, carry, timestep.observation, timestep.is_first())

    def sequence(params, batch):
        if config.use_rollout_state:
            carry = jax.tree.map(lambda x: x[0], batch.rollout_state)
        else:
            carry = network.initial_state(batch.first.shape[1])

        def one_step(carry, inputs):
            observation, first = inputs
            return network.apply(params, carry, observation, first)

        _, outputs = jax.lax.scan(one_step, carry, (batch.observation, batch.first))
        return outputs

    return _Network(init, network.initial_state, step, sequence)


def make_ppo(spec: EnvSpec, config: PPOConfig) -> Agent:
    network = (_feed_forward if config.core == "none" else _recurrent)(spec, config)
    schedules = {name: as_schedule(getattr(config, name)) for name, *_ in SCHEDULED_RANGES}
    clip = (
        []
        if math.isinf(config.max_grad_norm)
        else [optax.clip_by_global_norm(config.max_grad_norm)]
    )
    optimizer = optax.chain(*clip, optax.adam(schedules["learning_rate"], eps=1e-5))

    def init(key) -> PPOState:
        params = network.init(key)
        return PPOState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def act(state: PPOState, timestep: TimeStep, carry, key, mode="rollout", temperature=1.0):
        carry, (dist_params, value) = network.step(state.params, carry, timestep)
        if mode == "rollout":
            dist = action_distribution(spec.action, dist_params)
            action, log_prob = dist.sample_and_log_prob(seed=key)
            return action, carry, {"log_prob": log_prob, "value": value}
        if mode == "predict":
            return sample_action(spec.action, dist_params, key, temperature), carry, {}
        raise ValueError(f"act mode must be 'rollout' or 'predict', got {mode!r}")

    def preprocess(state: PPOState, experience: Experience) -> PPOBatch:
        """Experience [B, T+1] -> PPOBatch [B, T]; step T only bootstraps."""
        gamma = schedules["gamma"](state.update_step)
        gae_lambda = schedules["gae_lambda"](state.update_step)
        values = experience.extras["value"]
        is_last = (experience.step_type == StepType.LAST).astype(jnp.float32)
        # The transition out of a LAST step is a reset, not a transition: cut the trace there.
        advantage = jax.vmap(ops.gae)(
            experience.reward[:, 1:],
            gamma * experience.discount[:, 1:],
            values,
            gae_lambda * (1.0 - is_last[:, 1:]),
        )
        return PPOBatch(
            observation=experience.observation[:, :-1],
            action=jax.tree.map(lambda a: a[:, :-1], experience.action),
            log_prob=experience.extras["log_prob"][:, :-1],
            advantage=advantage,
            value_target=advantage + values[:, :-1],
            mask=1.0 - is_last[:, :-1],
            first=experience.step_type[:, :-1] == StepType.FIRST,
            rollout_state=jax.tree.map(lambda x: x[:, :-1], experience.state),
        )

    def loss(params, batch: PPOBatch, step):
        """The PPO loss on a mini-batch of sequences [L, M]."""
        epsilon = schedules["epsilon"](step)
        dist_params, value = network.sequence(params, batch)
        dist = action_distribution(spec.action, dist_params)
        log_prob = dist.log_prob(batch.action)
        log_ratio = log_prob - batch.log_prob
        ratio = jnp.exp(log_ratio)
        advantage = batch.advantage
        if config.normalize_advantages:
            advantage = _normalize(advantage, batch.mask)
        clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
        surrogate = jnp.minimum(ratio * advantage, clipped_ratio * advantage)
        policy_loss = -_masked_mean(surrogate, batch.mask)
        value_loss = 0.5 * _masked_mean((value - batch.value_target) ** 2, batch.mask)
        entropy = _masked_mean(dist.entropy(), batch.mask)
        total = (
            policy_loss
            + schedules["value_weight"](step) * value_loss
            - schedules["entropy_weight"](step) * entropy
        )
        metrics = {
            "loss/total": total,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": entropy,
            "ppo/approx_kl": _masked_mean((ratio - 1.0) - log_ratio, batch.mask),
            "ppo/clip_fraction": _masked_mean(
                (jnp.abs(ratio - 1.0) > epsilon).astype(jnp.float32), batch.mask
            ),
        }
        return total, metrics

    def update(state: PPOState, batch: PPOBatch, key):
        """One optimiser step on a mini-batch of sequences [L, M]."""
        del key
        grads, metrics = jax.grad(loss, has_aux=True)(state.params, batch, state.update_step)
        grads, metrics = parallel.device_mean((grads, metrics))
        for name, schedule in schedules.items():
            if not schedule.is_constant:
                metrics[f"schedule/{name}"] = schedule(state.update_step)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return PPOState(params, opt_state, state.update_step + 1), metrics

    def stop_updates(metrics) -> jax.Array:
        return metrics["ppo/approx_kl"] > 1.5 * config.target_kl

    return Agent(
        name="ppo",
        config=config,
        spec=spec,
        schedule=TrainSchedule(
            unroll_length=config.unroll_length,
            num_updates=config.n_optimizer_steps,
            mini_batch_size=config.optimizer_batch_size // config.mini_batch_length,
            mini_batch_length=config.mini_batch_length,
            replay="one_time",
            mini_batch_size_field="ppo.optimizer_batch_size",
            recurrent=config.core != "none",
            use_rollout_state=config.use_rollout_state and config.core != "none",
        ),
        init=init,
        initial_carry=network.initial_carry,
        act=act,
        preprocess=preprocess,
        update=update,
        params=lambda state: state.params,
        stop_updates=None if math.isinf(config.target_kl) else stop_updates,
    )
