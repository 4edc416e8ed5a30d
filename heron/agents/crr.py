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
from heron.agents.base import Agent, check, check_scheduled, replay_schedule
from heron.networks import actor_critic
from heron.networks.recurrent import CORES
from heron.networks.recurrent_actor_critic import RecurrentCritic, RecurrentPolicy
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
    core: Literal["none", "lstm", "gru"] = "none"
    """Recurrent core of the policy and of the critic; its state resets where episodes start."""
    core_size: int = 128
    """Units of each recurrent core."""
    use_rollout_state: bool = False
    """Start each training sequence from the core states recorded when acting (ALF)."""
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
            self.core in ("none", *CORES),
            f"crr.core must be one of none, {', '.join(CORES)}, got {self.core!r}",
        )
        check(self.core_size >= 1, f"crr.core_size must be >= 1, got {self.core_size}")
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


class _Networks(NamedTuple):
    """How CRR runs its policy and critic, feed-forward or recurrent (chosen once).

    init: key -> (policy params, critic params).
    initial_carry: batch_size -> the acting carry (core states; () when feed-forward).
    step: (state, timestep [B], carry, key, temperature, boltzmann) -> (action, carry), acting.
    policy_view: (params, batch [L, M], start, initial) -> the policy's distribution parameters
      at the L - 1 steps from ``start`` (0: the transitions' first steps, 1: their next steps).
    critic_view: (params, batch, start, initial) -> evaluate(actions [N, L-1, M, ...]) ->
      logits [N, L-1, M, atoms] at those steps. Recurrent cores start from ``initial`` (the
      rollout states of step 0, or zeros) and see the steps from ``start`` on, so the target
      networks skip observation 0 (as in Acme).
    """

    init: Any
    initial_carry: Any
    step: Any
    policy_view: Any
    critic_view: Any


def _tile(count: int, tree):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (count,) + x.shape), tree)


def make_crr(spec: EnvSpec, config: CRRConfig) -> Agent:
    action_spec = spec.action
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
    recurrent = config.core != "none"
    networks = (_recurrent if recurrent else _feed_forward)(spec, config, atoms)

    def init(key) -> CRRState:
        policy_params, critic_params = networks.init(key)
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
        if mode not in ("rollout", "predict"):
            raise ValueError(f"act mode must be 'rollout' or 'predict', got {mode!r}")
        boltzmann_acting = mode == "rollout" and config.acting == "boltzmann"
        temperature = 1.0 if mode == "rollout" else temperature
        action, carry = networks.step(state, timestep, carry, key, temperature, boltzmann_acting)
        return actor_critic.to_box(action_spec, action), carry, {}

    def sample_sequences(dist_params, key, count):
        """count policy samples at each step of sequences [T, M]: [count, T, M, (d)], each
        sequence drawing from its own key (the same draws however the M sequences are split
        over devices)."""

        def one_sequence(sequence_params, sequence_key):  # [T, ...] -> [count, T, ...]
            keys = jax.random.split(sequence_key, count)
            return jax.vmap(lambda k: actor_critic.sample(action_spec, sequence_params, k))(keys)

        size = jax.tree.leaves(dist_params)[0].shape[1]
        keys = parallel.example_keys(key, size)
        return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=2)(dist_params, keys)

    def q_mean(logits):
        return jnp.sum(jax.nn.softmax(logits) * atoms, axis=-1)

    def transition_mask(batch):
        """Transitions t -> t+1 of sequences [L, M]: none out of a LAST step (a reset)."""
        return (batch.step_type[:-1] != StepType.LAST).astype(jnp.float32)

    def td_target_probs(state: CRRState, batch, initial, key):
        """The target distribution at each next step [L-1, M, atoms]: the target critic's
        distributions of N target-policy actions, averaged in log space."""
        next_actions = sample_sequences(
            networks.policy_view(state.target_policy_params, batch, 1, initial),
            key,
            config.num_action_samples_td,
        )
        target_logits = networks.critic_view(state.target_critic_params, batch, 1, initial)(
            next_actions
        )  # [N, L-1, M, atoms]
        log_probs = jax.vmap(ops.average_log_probs, in_axes=1, out_axes=0)(
            target_logits.reshape(target_logits.shape[0], -1, config.num_atoms)
        )
        return jnp.exp(log_probs).reshape(target_logits.shape[1:])

    def critic_loss(critic_params, batch, initial, target_probs, gamma):
        """Categorical TD over the transitions t -> t+1 of sequences [L, M]."""
        taken = actor_critic.from_box(action_spec, batch.action[:-1])[None]
        logits = networks.critic_view(critic_params, batch, 0, initial)(taken)[0]
        losses = jax.vmap(ops.categorical_td_loss, in_axes=(None, 0, 0, 0, 0))(
            atoms,
            logits.reshape(-1, config.num_atoms),
            batch.reward[1:].reshape(-1),
            (gamma * batch.discount[1:]).reshape(-1),
            target_probs.reshape(-1, config.num_atoms),
        )
        loss = parallel.masked_mean(losses, transition_mask(batch).reshape(-1))
        return loss, {"loss/critic": loss}

    def policy_loss(policy_params, state: CRRState, batch, initial, key):
        """-log pi(a|s) x f(A) over the transitions' first steps."""
        action = actor_critic.from_box(action_spec, batch.action[:-1])
        evaluate = networks.critic_view(state.critic_params, batch, 0, initial)
        q = q_mean(evaluate(action[None])[0])
        samples = sample_sequences(
            networks.policy_view(state.policy_params, batch, 0, initial),
            key,
            config.num_action_samples_policy,
        )
        baseline = reduce_baseline(q_mean(evaluate(samples)), axis=0)
        advantage = jax.lax.stop_gradient(q - baseline)
        coefficient = improvement(advantage, config.beta, config.ratio_upper_bound)
        dist_params = networks.policy_view(policy_params, batch, 0, initial)
        log_prob = actor_critic.log_prob(action_spec, dist_params, action)
        loss = -parallel.masked_mean(log_prob * coefficient, transition_mask(batch))
        return loss, {
            "loss/policy": loss,
            "crr/advantage": jnp.mean(advantage),
            "crr/coefficient": jnp.mean(coefficient),
            "crr/q": jnp.mean(q),
        }

    def initial_states(batch):
        """Where recurrent cores start each sequence: the recorded rollout states of step 0
        under use_rollout_state, else zeros."""
        if not recurrent:
            return ()
        if config.use_rollout_state:
            return jax.tree.map(lambda x: x[0], batch.state)
        return networks.initial_carry(batch.step_type.shape[1])

    def update(state: CRRState, batch: Experience, key):
        """One step of both optimisers on sequences [L, M]; hard target copies on schedule."""
        target_key, policy_key = jax.random.split(key)
        gamma = discount(state.update_step)
        initial = initial_states(batch)
        target_probs = td_target_probs(state, batch, initial, target_key)
        critic_grads, critic_metrics = jax.grad(critic_loss, has_aux=True)(
            state.critic_params, batch, initial, target_probs, gamma
        )
        policy_grads, policy_metrics = jax.grad(policy_loss, has_aux=True)(
            state.policy_params, state, batch, initial, policy_key
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

        def target(online, old):  # hard copies every target_update_period updates
            return optax.periodic_update(online, old, step, config.target_update_period)

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
        schedule=replay_schedule(
            "crr", config, config.mini_batch_length, recurrent, config.use_rollout_state
        ),
        init=init,
        initial_carry=networks.initial_carry,
        act=act,
        preprocess=lambda state, experience: experience,
        update=update,
        params=lambda state: state.policy_params,
    )


def _window(batch, start: int) -> slice:
    """The L - 1 steps of sequences [L, M] from ``start``: the transitions' first steps (0)
    or their next steps (1)."""
    return slice(start, start + batch.step_type.shape[0] - 1)


def _flatten(spec: EnvSpec, observation):
    return actor_critic.flat_observation(spec.observation_shape, observation)


def _example_inputs(spec: EnvSpec):
    observation = jnp.zeros((1, math.prod(spec.observation_shape)), jnp.float32)
    action = (
        jnp.zeros((1,), jnp.int32)
        if spec.action.is_discrete
        else jnp.zeros((1, len(spec.action.low)), jnp.float32)
    )
    return observation, action


def _choose(key, candidates, q, beta, states=None):
    """Boltzmann resampling of N candidates [N, B, ...] (and their states) by softmax(Q / beta)."""
    if states is None:
        return boltzmann.resample(key, candidates, q, beta)[0], None
    action, chosen, _ = boltzmann.resample_with_states(key, candidates, q, beta, states)
    return action, chosen


def _feed_forward(spec: EnvSpec, config: CRRConfig, atoms) -> _Networks:
    action_spec = spec.action
    policy = actor_critic.Policy(action_spec, config.hidden_sizes)
    critic = actor_critic.DistributionalCritic(action_spec, config.num_atoms, config.hidden_sizes)

    def init(key):
        policy_key, critic_key = jax.random.split(key)
        observation, action = _example_inputs(spec)
        return policy.init(policy_key, observation), critic.init(critic_key, observation, action)

    def step(state, timestep, carry, key, temperature, boltzmann_acting):
        observation = _flatten(spec, timestep.observation)
        dist_params = policy.apply(state.policy_params, observation)
        if not boltzmann_acting:
            return actor_critic.sample(action_spec, dist_params, key, temperature), carry
        sample_key, choice_key = jax.random.split(key)
        keys = jax.random.split(sample_key, config.boltzmann_samples)
        candidates = jax.vmap(lambda k: actor_critic.sample(action_spec, dist_params, k))(keys)
        logits = critic.apply(
            state.critic_params, _tile(config.boltzmann_samples, observation), candidates
        )
        q = jnp.sum(jax.nn.softmax(logits) * atoms, axis=-1)
        return _choose(choice_key, candidates, q, config.boltzmann_beta)[0], carry

    def policy_view(params, batch, start, initial):
        del initial
        return policy.apply(params, _flatten(spec, batch.observation[_window(batch, start)]))

    def critic_view(params, batch, start, initial):
        del initial
        observation = _flatten(spec, batch.observation[_window(batch, start)])

        def evaluate(actions):
            return critic.apply(params, _tile(actions.shape[0], observation), actions)

        return evaluate

    return _Networks(init, lambda batch_size: (), step, policy_view, critic_view)


def _recurrent(spec: EnvSpec, config: CRRConfig, atoms) -> _Networks:
    """Policy and critic with LSTM/GRU cores, reset where episodes start. The acting carry is
    (policy state, critic state); the critic's state advances on the chosen action."""
    action_spec = spec.action
    policy = RecurrentPolicy(action_spec, config.hidden_sizes, config.core, config.core_size)
    critic = RecurrentCritic(
        action_spec, config.hidden_sizes, config.core, config.core_size, config.num_atoms
    )

    def initial_carry(batch_size: int):
        return (policy.initial_state((batch_size,)), critic.initial_state((batch_size,)))

    def init(key):
        policy_key, critic_key = jax.random.split(key)
        observation, action = _example_inputs(spec)
        first = jnp.ones((1,), bool)
        policy_state, critic_state = initial_carry(1)
        return (
            policy.init(policy_key, policy_state, observation, first),
            critic.init(critic_key, critic_state, observation, action, first),
        )

    def step(state, timestep, carry, key, temperature, boltzmann_acting):
        observation = _flatten(spec, timestep.observation)
        first = timestep.step_type == StepType.FIRST
        policy_state, critic_state = carry
        policy_state, dist_params = policy.apply(
            state.policy_params, policy_state, observation, first
        )
        if not boltzmann_acting:
            action = actor_critic.sample(action_spec, dist_params, key, temperature)
            critic_state, _ = critic.apply(
                state.critic_params, critic_state, observation, action, first
            )
            return action, (policy_state, critic_state)
        count = config.boltzmann_samples
        sample_key, choice_key = jax.random.split(key)
        keys = jax.random.split(sample_key, count)
        candidates = jax.vmap(lambda k: actor_critic.sample(action_spec, dist_params, k))(keys)
        critic_states, logits = critic.apply(
            state.critic_params,
            _tile(count, critic_state),
            _tile(count, observation),
            candidates,
            _tile(count, first),
        )
        q = jnp.sum(jax.nn.softmax(logits) * atoms, axis=-1)
        states = (_tile(count, policy_state), critic_states)
        action, chosen = _choose(choice_key, candidates, q, config.boltzmann_beta, states)
        return action, chosen

    def inputs(batch, start):
        window = _window(batch, start)
        return (
            _flatten(spec, batch.observation[window]),
            actor_critic.from_box(action_spec, batch.action[window]),
            batch.step_type[window] == StepType.FIRST,
        )

    def policy_view(params, batch, start, initial):
        observation, _, first = inputs(batch, start)

        def one_step(core_state, step_inputs):
            return policy.apply(params, core_state, *step_inputs)

        return jax.lax.scan(one_step, initial[0], (observation, first))[1]

    def critic_view(params, batch, start, initial):
        observation, action, first = inputs(batch, start)

        def one_step(core_state, step_inputs):
            new_state, _ = critic.apply(params, core_state, *step_inputs)
            return new_state, core_state

        # The state before each step: the steps before it in the window, taken actions.
        states = jax.lax.scan(one_step, initial[1], (observation, action, first))[1]

        def evaluate(actions):
            count = actions.shape[0]
            tiled = _tile(count, (states, observation, first))
            return critic.apply(params, tiled[0], tiled[1], actions, tiled[2])[1]

        return evaluate

    return _Networks(init, initial_carry, step, policy_view, critic_view)
