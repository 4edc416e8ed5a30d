"""Critic Regularised Regression (Wang et al., 2020, https://arxiv.org/abs/2006.15134).

A distributional (categorical) critic trained by categorical TD learning against targets
built from ``num_action_samples_td`` target-policy actions at the next step (their
distributions averaged in log space), and a policy trained by weighted behaviour cloning:
loss = -log pi(a|s) x f(A), A = E[Q(s, a)] - V(s), V reduced (mean / max / min) over
``num_action_samples_policy`` policy samples, f one of exp (min(exp(A / beta), bound)),
binary (1[A > 0]) or all (1, behaviour cloning). Hard target copies every
``target_update_period`` updates, after updates 1, P + 1, 2P + 1, ... as in Acme. Trained
off-policy on sequences of ``sequence_length`` steps (``sequence_length - 1`` transitions
each); as in Acme each loss is the transitions' mean times (L - 1) / L (Acme sums the per-step
means and divides by L), so gradients, and where the global-norm clip binds, are Acme's.

With a recurrent core, policy and critic unroll over each sequence from its start state
(zeros, or the states recorded when acting under ``use_rollout_state``); as in Acme the
target networks skip observation 0, and they start from the state recorded before step 1.
The critic's state advances on the actions taken.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp

from heron import ops, parallel
from heron.agents import actor_critic, boltzmann, learning
from heron.agents.actions import from_box, to_box
from heron.agents.actor_critic import Critics
from heron.agents.base import (
    Agent,
    ReplayConfig,
    check_config,
    check_recurrence,
    register,
    warn_zero_start,
)
from heron.configs import check, choice, integer, number, registered, scheduled
from heron.networks import (
    DenseHead,
    Network,
    NetworkConfig,
    distributions,
)
from heron.specs import EnvSpec
from heron.types import StepType, TimeStep


def exp_coefficient(advantage, beta, ratio_upper_bound):
    return jnp.minimum(jnp.exp(advantage / beta), ratio_upper_bound)


def binary_coefficient(advantage, beta, ratio_upper_bound):
    del beta, ratio_upper_bound
    return (advantage > 0).astype(jnp.float32)


def all_coefficient(advantage, beta, ratio_upper_bound):
    del beta, ratio_upper_bound
    return jnp.ones_like(advantage)


CLIPPED_WARNING = 0.1  # the share of target mass outside the support worth a warning
POLICY_IMPROVEMENT = {"exp": exp_coefficient, "binary": binary_coefficient, "all": all_coefficient}
BASELINE_REDUCE = {"mean": jnp.mean, "max": jnp.max, "min": jnp.min}


def acme_network(core_size: int = 128) -> NetworkConfig:
    """Acme's LayerNormMLP (256, 256) torso; an optional core of ``core_size`` units."""
    return NetworkConfig(
        hidden_sizes=(256, 256), activation="elu", torso="layer_norm_mlp", core_size=core_size
    )


@dataclasses.dataclass(frozen=True)
class CRRConfig:
    """CRR hyperparameters (Acme's defaults where Acme has one)."""

    learning_rate: float | str = scheduled(3e-4, 0.0, low_open=True)
    """Adam step size of the policy and the critic."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1]."""
    num_atoms: int = integer(51, 2)
    """Atoms of the categorical critic, >= 2."""
    vmin: float = number(-150.0)
    """Smallest atom (value support lower end)."""
    vmax: float = number(150.0)
    """Largest atom; > vmin."""
    policy_improvement_mode: Literal["exp", "binary", "all"] = choice(
        "exp", tuple(POLICY_IMPROVEMENT)
    )
    """exp: min(exp(A / beta), bound); binary: 1[A > 0]; all: 1 (behaviour cloning)."""
    baseline_reduce: Literal["mean", "max", "min"] = choice("mean", tuple(BASELINE_REDUCE))
    """How V(s) is reduced over the policy's sampled actions."""
    beta: float = number(1.0, 0.0, low_open=True)
    """Temperature of the exp coefficient, > 0."""
    ratio_upper_bound: float = number(20.0, 0.0, low_open=True)
    """Upper bound of the exp coefficient, > 0."""
    num_action_samples_policy: int = integer(4, 1)
    """Policy samples for the baseline V(s)."""
    num_action_samples_td: int = integer(4, 1)
    """Target-policy samples whose distributions are averaged into the TD target."""
    target_update_period: int = integer(100, 1)
    """Updates between hard copies into the target networks (after updates 1, P + 1, ...)."""
    max_grad_norm: float = number(40.0, 0.0, low_open=True, inf_is_off=True)
    """Global-norm gradient clipping; inf disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer (Trax's policy_and_value_optimizer)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<network>/<path> and vars/<network>/<path>."""
    network: NetworkConfig = dataclasses.field(default_factory=acme_network)
    """Torso and core of the policy and of the critic."""
    use_rollout_state: bool = False
    """Start each training sequence from the core states recorded when acting (ALF)."""
    acting: Literal["policy", "boltzmann"] = choice("policy", ("policy", "boltzmann"))
    """Collect with actions sampled from the policy, or with policy samples resampled by
    softmax(Q / boltzmann_beta) (Acme's ExpQWeightedPolicy)."""
    eval_acting: Literal["policy", "boltzmann"] = choice("policy", ("policy", "boltzmann"))
    """Evaluate (and ``heron collect --temperature T``) with the policy at temperature T, or
    with policy samples resampled by softmax(Q / (boltzmann_beta x T)); T = 0 takes the
    policy's mode, or the candidate of highest Q."""
    boltzmann_samples: int = integer(16, 1)
    """Candidate actions for Boltzmann acting."""
    boltzmann_beta: float = number(1.0, 0.0, low_open=True)
    """Temperature of Boltzmann acting, > 0."""
    unroll_length: int = integer(1, 1)
    """Environment steps collected per environment per iteration."""
    batch_size: int = integer(256, 1)
    """Sequences per update."""
    sequence_length: int = integer(2, 2)
    """Steps per sequence (>= 2: a transition needs its next step)."""
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    """The uniform replay: capacity, warm-up and replay ratio."""

    # options that only change how experience is collected (refused when a run collects none)
    collecting: ClassVar[dict[str, str]] = {
        "acting": "sets how experience is collected (crr.eval_acting sets how it evaluates)"
    }

    def __post_init__(self):
        check_config(self, "crr")
        check(
            self.vmin < self.vmax,
            f"crr.vmin must be < crr.vmax, got vmin={self.vmin}, vmax={self.vmax}",
        )
        check_recurrence(self, "crr")


class CRRState(NamedTuple):
    policy_params: Any
    critic_params: Any
    target_policy_params: Any
    target_critic_params: Any
    policy_opt_state: Any
    critic_opt_state: Any
    update_step: jax.Array  # int32
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


class CRRNetworks(NamedTuple):
    """The policy on observations and the categorical critic on observations beside encoded
    actions (``actions.encode_action``), logits [..., num_atoms] over ``atoms``."""

    spec: EnvSpec
    policy: Network
    critic: Critics
    atoms: jax.Array

    def distribution(self, head_output):
        return distributions.make(self.spec.action, head_output, squash=True)

    def q_mean(self, logits):
        return jnp.sum(jax.nn.softmax(logits) * self.atoms, axis=-1)

    def initial_carry(self, batch_size: int) -> dict:
        shape = (batch_size,)
        return {
            "policy": self.policy.initial_state(shape),
            "critic": self.critic.initial_state(shape),
        }


def networks(spec: EnvSpec, config: CRRConfig) -> CRRNetworks:
    policy, critic = actor_critic.policy_and_critic(
        spec, config.network, DenseHead((config.num_atoms,), 0.0)
    )
    atoms = jnp.linspace(config.vmin, config.vmax, config.num_atoms)
    return CRRNetworks(spec, policy, Critics(critic, spec.action), atoms)


# --------------------------------------------------------------------------- the losses


class Inputs(NamedTuple):
    """Sequences [L, M] as the losses read them (L - 1 transitions each)."""

    observation: Any  # [L, M, *obs] as the environment gives them
    action: Any  # [L, M, ...] in [-1, 1] (Box) or indices
    first: Any  # bool [L, M]
    mask: Any  # [L-1, M]: 0 for the transitions out of a LAST step (resets)
    reward: Any  # [L, M]
    discount: Any  # [L, M]


def inputs_of(networks: CRRNetworks, batch) -> Inputs:
    return Inputs(
        observation=batch.observation,
        action=from_box(networks.spec.action, batch.action),
        first=batch.step_type == StepType.FIRST,
        mask=(batch.step_type[:-1] != StepType.LAST).astype(jnp.float32),
        reward=batch.reward,
        discount=batch.discount,
    )


def start_states(networks: CRRNetworks, config: CRRConfig, batch, t: int):
    """Where the cores start when a window begins at step ``t``: the states recorded before
    step t under use_rollout_state, else zeros."""
    return learning.start_state(config, "crr", batch, networks.initial_carry, t)


def samples(networks: CRRNetworks, head_output, key, count: int):
    """``count`` samples at each step of sequences [T, M]: [count, T, M, ...]; each
    sequence draws from its own key, the same however the M sequences are split over
    devices."""
    keys = parallel.example_keys(key, jax.tree.leaves(head_output)[0].shape[1])

    def one_sequence(sequence_output, sequence_key):  # [T, ...] -> [count, T, ...]
        dist = networks.distribution(sequence_output)
        return jax.vmap(dist.sample)(jax.random.split(sequence_key, count))

    return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=2)(head_output, keys)


def next_step_targets(networks: CRRNetworks, config: CRRConfig, state: CRRState, batch, key):
    """The target distribution at each next step [L-1, M, atoms]: the target critic's
    distributions of N target-policy actions, averaged in log space. The target
    networks see steps 1..L-1, from the states recorded before step 1 (or zeros)."""
    inputs = inputs_of(networks, batch)
    observation, action, first = inputs.observation[1:], inputs.action[1:], inputs.first[1:]
    start = start_states(networks, config, batch, 1)
    next_head = networks.policy.unroll(
        state.target_policy_params, start["policy"], observation, first
    )[1]
    next_actions = samples(networks, next_head, key, config.num_action_samples_td)
    critic = networks.critic
    next_states = critic.states(
        state.target_critic_params, start["critic"], observation, action, first
    )
    logits = critic.candidates(
        state.target_critic_params, next_states, observation, first, next_actions
    )[1]  # [N, L-1, M, atoms]
    log_probs = jax.vmap(ops.average_log_probs, in_axes=1)(
        logits.reshape(logits.shape[0], -1, config.num_atoms)
    )
    return jnp.exp(log_probs).reshape(logits.shape[1:])


def per_sequence(inputs: Inputs):
    """(L - 1) / L: Acme sums the L-1 transitions' batch means and divides by the sequence
    length L."""
    length = inputs.first.shape[0]
    return (length - 1) / length


def critic_loss(
    critic_params, networks: CRRNetworks, config: CRRConfig, batch, target_probs, gamma
):
    """Categorical TD towards ``target_probs`` [(L-1) M, atoms] at discount ``gamma``; aux:
    the metrics. The critic sees the transitions' first steps 0..L-2."""
    inputs = inputs_of(networks, batch)
    start = start_states(networks, config, batch, 0)
    logits = networks.critic.unroll(
        critic_params,
        start["critic"],
        inputs.observation[:-1],
        inputs.action[:-1],
        inputs.first[:-1],
    )[1]
    discount = gamma * inputs.discount[1:]
    losses = jax.vmap(ops.categorical_td_loss, in_axes=(None, 0, 0, 0, 0))(
        networks.atoms,
        logits.reshape(-1, config.num_atoms),
        inputs.reward[1:].reshape(-1),
        discount.reshape(-1),
        target_probs,
    )
    loss = parallel.masked_mean(losses, inputs.mask.reshape(-1)) * per_sequence(inputs)
    shifted = inputs.reward[1:, :, None] + discount[..., None] * networks.atoms
    outside = (shifted < config.vmin) | (shifted > config.vmax)  # [L-1, M, atoms]
    clipped = jnp.sum(outside * target_probs.reshape(outside.shape), axis=-1)
    return loss, {
        "loss/critic": loss,
        "crr/clipped_fraction": parallel.masked_mean(clipped, inputs.mask),
    }


def policy_loss(
    policy_params, networks: CRRNetworks, config: CRRConfig, state: CRRState, batch, key
):
    """Weighted behaviour cloning of the actions taken at steps 0..L-2, weighted by
    ``policy_improvement_mode`` of their advantage over ``baseline_reduce`` of the critic
    at policy samples; aux: the metrics."""
    inputs = inputs_of(networks, batch)
    start = start_states(networks, config, batch, 0)
    observation, first = inputs.observation[:-1], inputs.first[:-1]
    _, taken_logits, states = networks.critic.unroll(
        state.critic_params, start["critic"], observation, inputs.action[:-1], first
    )
    head = networks.policy.unroll(policy_params, start["policy"], observation, first)[1]
    q = networks.q_mean(taken_logits)
    candidates = samples(
        networks, jax.lax.stop_gradient(head), key, config.num_action_samples_policy
    )
    q_candidates = networks.q_mean(
        networks.critic.candidates(state.critic_params, states, observation, first, candidates)[1]
    )
    baseline = BASELINE_REDUCE[config.baseline_reduce](q_candidates, axis=0)
    advantage = jax.lax.stop_gradient(q - baseline)
    improvement = POLICY_IMPROVEMENT[config.policy_improvement_mode]
    coefficient = improvement(advantage, config.beta, config.ratio_upper_bound)
    log_prob = networks.distribution(head).log_prob(inputs.action[:-1])
    loss = -parallel.masked_mean(log_prob * coefficient, inputs.mask) * per_sequence(inputs)
    return loss, {
        "loss/policy": loss,
        "crr/advantage": jnp.mean(advantage),
        "crr/coefficient": jnp.mean(coefficient),
        "crr/q": jnp.mean(q),
    }


# --------------------------------------------------------------------------- the agent


def make_crr(spec: EnvSpec, config: CRRConfig, devices=None) -> Agent:
    warn_zero_start(config, "crr")
    nets = networks(spec, config)
    hyper = learning.Hyperparameters(config, ("learning_rate", "discount"))
    policy_optimizer, critic_optimizer = learning.optimizer(config), learning.optimizer(config)

    def init(key) -> CRRState:
        policy_key, critic_key = jax.random.split(key)
        policy_params, critic_params = nets.policy.init(policy_key), nets.critic.init(critic_key)
        return CRRState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_policy_params=policy_params,
            target_critic_params=critic_params,
            policy_opt_state=policy_optimizer.init(policy_params),
            critic_opt_state=critic_optimizer.init(critic_params),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def boltzmann_choice(state: CRRState, observation, first, carry, dist, key, beta):
        """Acme's ExpQWeightedPolicy: ``boltzmann_samples`` policy samples scored by the
        critic, one resampled per environment by softmax(Q / boltzmann_beta); a recurrent
        critic continues from the state of the chosen sample."""
        count = config.boltzmann_samples
        sample_key, choice_key = jax.random.split(key)
        candidates = jax.vmap(dist.sample)(jax.random.split(sample_key, count))  # [N, B, ...]
        critic_states, logits = nets.critic.candidates(
            state.critic_params, carry["critic"], observation, first, candidates
        )
        action, chosen, _ = boltzmann.resample_with_states(
            choice_key, candidates, nets.q_mean(logits), beta, critic_states
        )
        return action, chosen

    def step(state: CRRState, timestep: TimeStep, carry, key, temperature, resample: bool):
        observation, first = timestep.observation, timestep.is_first()
        policy_state, head_output = nets.policy.step(
            state.policy_params, carry["policy"], observation, first
        )
        dist = nets.distribution(head_output)
        if resample:
            beta = config.boltzmann_beta * temperature
            action, critic_state = boltzmann_choice(
                state, observation, first, carry, dist, key, beta
            )
        else:
            action = dist.sample(key, temperature)
            critic_state = carry["critic"]
            if nets.critic.recurrent:  # the critic's memory follows the actions taken
                critic_state = nets.critic.step(
                    state.critic_params, critic_state, observation, action, first
                )[0]
        return to_box(spec.action, action), {"policy": policy_state, "critic": critic_state}

    def act(state: CRRState, timestep: TimeStep, carry, key):
        action, new_carry = step(state, timestep, carry, key, 1.0, config.acting == "boltzmann")
        return action, new_carry, learning.rollout_extras(config, carry)

    def policy(state: CRRState, timestep: TimeStep, carry, key, temperature):
        return step(state, timestep, carry, key, temperature, config.eval_acting == "boltzmann")

    def update(state: CRRState, batch, key):
        """One step of both optimisers on sequences [L, M]; hard target copies on schedule."""
        target_key, policy_key = jax.random.split(key)
        step, controls = state.update_step, state.controls
        gamma = hyper("discount", step, controls)
        target_probs = next_step_targets(nets, config, state, batch, target_key)
        critic_grads, critic_metrics = jax.grad(critic_loss, has_aux=True)(
            state.critic_params,
            nets,
            config,
            batch,
            target_probs.reshape(-1, config.num_atoms),
            gamma,
        )
        policy_grads, policy_metrics = jax.grad(policy_loss, has_aux=True)(
            state.policy_params, nets, config, state, batch, policy_key
        )
        critic_grads, policy_grads, critic_metrics, policy_metrics = parallel.device_mean(
            (critic_grads, policy_grads, critic_metrics, policy_metrics)
        )
        rate = hyper("learning_rate", step, controls)
        critic_params, critic_opt_state = critic_optimizer.step(
            critic_grads, state.critic_opt_state, state.critic_params, rate
        )
        policy_params, policy_opt_state = policy_optimizer.step(
            policy_grads, state.policy_opt_state, state.policy_params, rate
        )

        def target(online, old):  # as Acme: copies after updates 1, P + 1, 2P + 1, ...
            return learning.target_update(online, old, step, config.target_update_period)

        new_state = CRRState(
            policy_params=policy_params,
            critic_params=critic_params,
            target_policy_params=target(policy_params, state.target_policy_params),
            target_critic_params=target(critic_params, state.target_critic_params),
            policy_opt_state=policy_opt_state,
            critic_opt_state=critic_opt_state,
            update_step=step + 1,
            controls=controls,
        )
        metrics = {
            **critic_metrics,
            **policy_metrics,
            **learning.gradient_metrics(
                config,
                {
                    "critic": (critic_grads, state.critic_params),
                    "policy": (policy_grads, state.policy_params),
                },
            ),
            **hyper.metrics(step, controls),
        }
        return new_state, metrics

    def advise(metrics: dict) -> dict[str, str]:
        """Targets clipped to the value support train the critic towards the wrong values."""
        fraction = metrics.get("crr/clipped_fraction", 0.0)
        if fraction <= CLIPPED_WARNING:
            return {}
        return {
            "clipped": f"crr: {fraction:.0%} of the critic's target mass falls outside its support "
            f"[{config.vmin:g}, {config.vmax:g}] and is clipped to its edges: scale the rewards "
            "(--reward-scale) or widen the support (--crr.vmin, --crr.vmax)"
        }

    return Agent(
        name="crr",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=nets.initial_carry,
        act=act,
        policy=policy,
        params=lambda state: state.policy_params,
        **learning.off_policy_learning("crr", config, update, devices),
        advise=advise,
    )


register("crr", CRRConfig, make_crr)
