"""Critic Regularised Regression (Wang et al., 2020, https://arxiv.org/abs/2006.15134).

A distributional (categorical) critic trained by categorical TD learning against targets
built from ``num_action_samples_td`` target-policy actions at the next step (their
distributions averaged in log space), and a policy trained by weighted behaviour cloning:
loss = -log pi(a|s) x f(A), A = E[Q(s, a)] - V(s), V reduced (mean / max / min) over
``num_action_samples_policy`` policy samples, f one of exp (min(exp(A / beta), bound)),
binary (1[A > 0]) or all (1, behaviour cloning). Hard target copies every
``target_update_period`` updates. Trained off-policy from the ``uniform`` replay on
sequences of ``mini_batch_length`` steps (``mini_batch_length - 1`` transitions each).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from heron import ops, parallel
from heron.agents import boltzmann
from heron.agents.base import Agent, TrainSchedule, check, check_scheduled
from heron.networks import actor_critic
from heron.schedules import as_schedule
from heron.specs import EnvSpec
from heron.types import Experience, StepType, TimeStep


def exp_coefficient(advantage, beta, ratio_upper_bound):
    return jnp.minimum(jnp.exp(advantage / beta), ratio_upper_bound)


def binary_coefficient(advantage, beta, ratio_upper_bound):
    del beta, ratio_upper_bound
    return (advantage > 0).astype(jnp.float32)


def all_coefficient(advantage, beta, ratio_upper_bound):
    del beta, ratio_upper_bound
    return jnp.ones_like(advantage)


POLICY_IMPROVEMENT = {"exp": exp_coefficient, "binary": binary_coefficient, "all": all_coefficient}
BASELINE_REDUCE = {"mean": jnp.mean, "max": jnp.max, "min": jnp.min}


@dataclasses.dataclass(frozen=True)
class CRRConfig:
    """CRR hyperparameters (Acme's defaults where Acme has one)."""

    learning_rate: float | str = 3e-4
    """Adam step size of the policy and the critic."""
    discount: float | str = 0.99
    """Reward discount factor, in [0, 1]."""
    num_atoms: int = 51
    """Atoms of the categorical critic, >= 2."""
    vmin: float = -150.0
    """Smallest atom (value support lower end)."""
    vmax: float = 150.0
    """Largest atom; > vmin."""
    policy_improvement_mode: Literal["exp", "binary", "all"] = "exp"
    """exp: min(exp(A / beta), bound); binary: 1[A > 0]; all: 1 (behaviour cloning)."""
    baseline_reduce: Literal["mean", "max", "min"] = "mean"
    """How V(s) is reduced over the policy's sampled actions."""
    beta: float = 1.0
    """Temperature of the exp coefficient, > 0."""
    ratio_upper_bound: float = 20.0
    """Upper bound of the exp coefficient, > 0."""
    num_action_samples_policy: int = 4
    """Policy samples for the baseline V(s)."""
    num_action_samples_td: int = 4
    """Target-policy samples whose distributions are averaged into the TD target."""
    target_update_period: int = 100
    """Updates between hard copies into the target networks."""
    max_grad_norm: float = 40.0
    """Global-norm gradient clipping; inf disables it."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the policy and of the critic."""
    acting: Literal["policy", "boltzmann"] = "policy"
    """Sample actions from the policy, or resample policy samples by softmax(Q / beta)."""
    boltzmann_samples: int = 16
    """Candidate actions for Boltzmann acting."""
    boltzmann_beta: float = 1.0
    """Temperature of Boltzmann acting, > 0."""
    unroll_length: int = 1
    """Environment steps collected per environment per iteration."""
    replay_ratio: float = 0.25
    """Optimiser updates per collected environment step."""
    mini_batch_size: int = 256
    """Sequences per update."""
    mini_batch_length: int = 2
    """Steps per sequence (>= 2: a transition needs its next step)."""
    replay_capacity: int = 100_000
    """Steps kept per environment in the uniform replay."""
    min_replay_size: int = 2_000
    """Transitions stored before the first update."""

    def __post_init__(self):
        check_scheduled("crr.learning_rate", self.learning_rate, 0.0, math.inf, False)
        check_scheduled("crr.discount", self.discount, 0.0, 1.0)
        check(self.num_atoms >= 2, f"crr.num_atoms must be >= 2, got {self.num_atoms}")
        check(
            self.vmin < self.vmax,
            f"crr.vmin must be < crr.vmax, got vmin={self.vmin}, vmax={self.vmax}",
        )
        check(
            self.policy_improvement_mode in POLICY_IMPROVEMENT,
            f"crr.policy_improvement_mode must be one of {', '.join(POLICY_IMPROVEMENT)}, "
            f"got {self.policy_improvement_mode!r}",
        )
        check(
            self.baseline_reduce in BASELINE_REDUCE,
            f"crr.baseline_reduce must be one of {', '.join(BASELINE_REDUCE)}, "
            f"got {self.baseline_reduce!r}",
        )
        check(
            self.acting in ("policy", "boltzmann"),
            f"crr.acting must be one of policy, boltzmann, got {self.acting!r}",
        )
        for name in (
            "beta",
            "ratio_upper_bound",
            "boltzmann_beta",
            "max_grad_norm",
            "replay_ratio",
        ):
            check(getattr(self, name) > 0, f"crr.{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "num_action_samples_policy",
            "num_action_samples_td",
            "target_update_period",
            "boltzmann_samples",
            "unroll_length",
            "mini_batch_size",
            "replay_capacity",
        ):
            check(getattr(self, name) >= 1, f"crr.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.mini_batch_length >= 2,
            f"crr.mini_batch_length must be >= 2 (a transition and its next step), "
            f"got {self.mini_batch_length}",
        )
        check(
            self.min_replay_size >= 0,
            f"crr.min_replay_size must be >= 0, got {self.min_replay_size}",
        )


class CRRState(NamedTuple):
    policy_params: Any
    critic_params: Any
    target_policy_params: Any
    target_critic_params: Any
    policy_opt_state: Any
    critic_opt_state: Any
    update_step: jax.Array  # int32


def make_crr(spec: EnvSpec, config: CRRConfig) -> Agent:
    action_spec = spec.action
    policy = actor_critic.Policy(action_spec, config.hidden_sizes)
    critic = actor_critic.DistributionalCritic(action_spec, config.num_atoms, config.hidden_sizes)
    atoms = jnp.linspace(config.vmin, config.vmax, config.num_atoms)
    learning_rate = as_schedule(config.learning_rate)
    discount = as_schedule(config.discount)
    improvement = POLICY_IMPROVEMENT[config.policy_improvement_mode]
    reduce_baseline = BASELINE_REDUCE[config.baseline_reduce]
    clip = (
        []
        if math.isinf(config.max_grad_norm)
        else [optax.clip_by_global_norm(config.max_grad_norm)]
    )
    policy_optimizer = optax.chain(*clip, optax.adam(learning_rate))
    critic_optimizer = optax.chain(*clip, optax.adam(learning_rate))
    if action_spec.is_discrete:
        low = high = None
    else:
        low, high = (jnp.asarray(b, jnp.float32) for b in action_spec.bounds)

    def flatten(observation):
        batch = observation.shape[: observation.ndim - len(spec.observation_shape)]
        return observation.reshape(batch + (-1,)).astype(jnp.float32)

    def to_env(action):  # [-1, 1] -> the Box
        return action if low is None else low + (action + 1.0) * 0.5 * (high - low)

    def from_env(action):  # the Box -> [-1, 1]
        return action if low is None else 2.0 * (action - low) / (high - low) - 1.0

    def q_mean(critic_params, observation, action):
        """E[Q(s, a)] under the categorical critic: [...] for observations [..., obs]."""
        logits = critic.apply(critic_params, observation, action)
        return jnp.sum(jax.nn.softmax(logits) * atoms, axis=-1)

    def sample_actions(policy_params, observation, key, count):
        """count policy samples at each observation: [count, *batch, (d)], in [-1, 1]."""
        dist_params = policy.apply(policy_params, observation)
        keys = jax.random.split(key, count)
        return jax.vmap(lambda k: actor_critic.sample(action_spec, dist_params, k))(keys)

    def sample_for_sequences(policy_params, observation, key, count):
        """``sample_actions`` for observations [T, M, obs]: [count, T, M, (d)], each sequence
        drawing from its own key (the same draws however the M sequences are split over
        devices)."""
        dist_params = policy.apply(policy_params, observation)

        def one_sequence(sequence_params, sequence_key):  # [T, ...] -> [count, T, ...]
            keys = jax.random.split(sequence_key, count)
            return jax.vmap(lambda k: actor_critic.sample(action_spec, sequence_params, k))(keys)

        keys = parallel.example_keys(key, observation.shape[1])
        return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=2)(dist_params, keys)

    def init(key) -> CRRState:
        policy_key, critic_key = jax.random.split(key)
        observation = jnp.zeros((1, math.prod(spec.observation_shape)), jnp.float32)
        action = (
            jnp.zeros((1,), jnp.int32)
            if action_spec.is_discrete
            else jnp.zeros((1, len(action_spec.low)), jnp.float32)
        )
        policy_params = policy.init(policy_key, observation)
        critic_params = critic.init(critic_key, observation, action)
        return CRRState(
            policy_params,
            critic_params,
            policy_params,
            critic_params,
            policy_optimizer.init(policy_params),
            critic_optimizer.init(critic_params),
            jnp.zeros((), jnp.int32),
        )

    def act(state: CRRState, timestep: TimeStep, carry, key, mode="rollout", temperature=1.0):
        observation = flatten(timestep.observation)
        if mode == "predict":
            dist_params = policy.apply(state.policy_params, observation)
            return (
                to_env(actor_critic.sample(action_spec, dist_params, key, temperature)),
                carry,
                {},
            )
        if mode != "rollout":
            raise ValueError(f"act mode must be 'rollout' or 'predict', got {mode!r}")
        if config.acting == "policy":
            action = sample_actions(state.policy_params, observation, key, 1)[0]
        else:
            sample_key, choice_key = jax.random.split(key)
            candidates = sample_actions(
                state.policy_params, observation, sample_key, config.boltzmann_samples
            )
            tiled = jnp.broadcast_to(observation, (config.boltzmann_samples,) + observation.shape)
            q = q_mean(state.critic_params, tiled, candidates)
            action, _ = boltzmann.resample(choice_key, candidates, q, config.boltzmann_beta)
        return to_env(action), carry, {}

    def critic_loss(critic_params, state: CRRState, batch, key, gamma):
        """Categorical TD over the transitions t -> t+1 of sequences [L, M]."""
        observation, action = flatten(batch.observation), from_env(batch.action)
        next_actions = sample_for_sequences(
            state.target_policy_params, observation[1:], key, config.num_action_samples_td
        )  # [N, L-1, M, ...]
        tiled = jnp.broadcast_to(observation[1:], next_actions.shape[:1] + observation[1:].shape)
        target_logits = critic.apply(state.target_critic_params, tiled, next_actions)
        target_probs = jnp.exp(
            jax.vmap(ops.average_log_probs, in_axes=1, out_axes=0)(
                target_logits.reshape(target_logits.shape[0], -1, config.num_atoms)
            )
        )
        logits = critic.apply(critic_params, observation[:-1], action[:-1])
        losses = jax.vmap(ops.categorical_td_loss, in_axes=(None, 0, 0, 0, 0))(
            atoms,
            logits.reshape(-1, config.num_atoms),
            batch.reward[1:].reshape(-1),
            (gamma * batch.discount[1:]).reshape(-1),
            target_probs,
        )
        mask = (batch.step_type[:-1] != StepType.LAST).reshape(-1).astype(jnp.float32)
        loss = parallel.masked_mean(losses, mask)
        return loss, {"loss/critic": loss}

    def policy_loss(policy_params, state: CRRState, batch, key):
        observation, action = flatten(batch.observation[:-1]), from_env(batch.action[:-1])
        q = q_mean(state.critic_params, observation, action)
        samples = sample_for_sequences(
            state.policy_params, observation, key, config.num_action_samples_policy
        )
        tiled = jnp.broadcast_to(observation, samples.shape[:1] + observation.shape)
        baseline = reduce_baseline(q_mean(state.critic_params, tiled, samples), axis=0)
        advantage = jax.lax.stop_gradient(q - baseline)
        coefficient = improvement(advantage, config.beta, config.ratio_upper_bound)
        log_prob = actor_critic.log_prob(
            action_spec, policy.apply(policy_params, observation), action
        )
        mask = (batch.step_type[:-1] != StepType.LAST).astype(jnp.float32)
        loss = -parallel.masked_mean(log_prob * coefficient, mask)
        return loss, {
            "loss/policy": loss,
            "crr/advantage": jnp.mean(advantage),
            "crr/coefficient": jnp.mean(coefficient),
            "crr/q": jnp.mean(q),
        }

    def update(state: CRRState, batch: Experience, key):
        """One step of both optimisers on sequences [L, M]; hard target copies on schedule."""
        critic_key, policy_key = jax.random.split(key)
        gamma = discount(state.update_step)
        critic_grads, critic_metrics = jax.grad(critic_loss, has_aux=True)(
            state.critic_params, state, batch, critic_key, gamma
        )
        policy_grads, policy_metrics = jax.grad(policy_loss, has_aux=True)(
            state.policy_params, state, batch, policy_key
        )
        critic_grads, policy_grads, critic_metrics, policy_metrics = parallel.device_mean(
            (critic_grads, policy_grads, critic_metrics, policy_metrics)
        )
        critic_updates, critic_opt_state = critic_optimizer.update(
            critic_grads, state.critic_opt_state, state.critic_params
        )
        policy_updates, policy_opt_state = policy_optimizer.update(
            policy_grads, state.policy_opt_state, state.policy_params
        )
        critic_params = optax.apply_updates(state.critic_params, critic_updates)
        policy_params = optax.apply_updates(state.policy_params, policy_updates)
        step = state.update_step + 1
        copy = step % config.target_update_period == 0
        target = lambda online, old: jax.tree.map(  # noqa: E731
            lambda o, t: jnp.where(copy, o, t), online, old
        )
        new_state = CRRState(
            policy_params,
            critic_params,
            target(policy_params, state.target_policy_params),
            target(critic_params, state.target_critic_params),
            policy_opt_state,
            critic_opt_state,
            step,
        )
        metrics = {
            **critic_metrics,
            **policy_metrics,
            "grad_norm/critic": optax.tree.norm(critic_grads),
            "grad_norm/policy": optax.tree.norm(policy_grads),
        }
        if not learning_rate.is_constant:
            metrics["schedule/learning_rate"] = learning_rate(state.update_step)
        return new_state, metrics

    return Agent(
        name="crr",
        config=config,
        spec=spec,
        schedule=TrainSchedule(
            unroll_length=config.unroll_length,
            num_updates=1,
            mini_batch_size=config.mini_batch_size,
            mini_batch_length=config.mini_batch_length,
            replay="uniform",
            mini_batch_size_field="crr.mini_batch_size",
            replay_capacity=config.replay_capacity,
            min_replay_size=max(config.min_replay_size, config.mini_batch_length),
            replay_ratio=config.replay_ratio,
        ),
        init=init,
        initial_carry=lambda batch_size: (),
        act=act,
        preprocess=lambda state, experience: experience,
        update=update,
        params=lambda state: state.policy_params,
    )
