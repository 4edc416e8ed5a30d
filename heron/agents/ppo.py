"""Proximal Policy Optimisation (Schulman et al., 2017, https://arxiv.org/abs/1707.06347).

The Trax PPO trainer's loss in heron's agent contract. ``learn`` takes the last unroll
[B, T+1] from the ``one_time`` replay (or unrolls of several actors from
``cycle_one_time``), computes GAE(discount, gae_lambda) advantages, cuts the steps into
sequences of ``sequence_length`` and runs ``num_epochs`` passes of shuffled mini-batches of
``batch_size`` sequences: a clipped surrogate, a value loss weighted by ``value_cost`` and an
entropy bonus weighted by ``entropy_cost``. With ``target_kl`` the passes stop by Trax's
rule: after each update the KL to the behaviour policy is estimated on the whole batch, and
once it exceeds 1.5 x target_kl no further update is made. The estimate differs from Trax's:
Trax averages log mu - log pi over the batch, which is not a KL and can be negative (so it
may never stop); heron averages (r - 1) - log r, r = pi / mu, an unbiased estimate of
KL(mu || pi) that is never negative. The same target_kl therefore stops at other points.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from heron import ops, parallel, replay
from heron.agents import learning
from heron.agents.base import (
    ROLLOUT_STATE,
    Agent,
    check_config,
    check_recurrence,
    extra,
    register,
    warn_zero_start,
)
from heron.configs import ConfigError, check, integer, number, registered, scheduled
from heron.networks import (
    DenseHead,
    Heads,
    NetworkConfig,
    PolicyHead,
    distributions,
    make_network,
    stack,
    tokens,
)
from heron.networks.token_policy import PolicyModel, token_model
from heron.networks.tokens import TokenConfig
from heron.specs import EnvSpec
from heron.types import Experience, StepType, TimeStep

SCHEDULED = ("learning_rate", "discount", "gae_lambda", "clip_range", "value_cost", "entropy_cost")

# Trax's names, refused with the field that replaced them (never reinterpreted silently).
RENAMED = {
    "gamma": "discount",
    "lambda_": "gae_lambda",
    "n_optimizer_steps": "num_epochs (passes over each batch)",
    "optimizer_batch_size": "batch_size (now counted in sequences, not steps)",
    "mini_batch_length": "sequence_length",
    "value_weight": "value_cost",
    "entropy_weight": "entropy_cost",
    # epsilon is DQN's exploration rate (and heron collect's): one name per concept
    "epsilon": "clip_range",
    "core": "network.core",
    "core_size": "network.core_size",
    "hidden_sizes": "network.hidden_sizes",
    "activation": "network.activation",
    # Trax padded each trajectory to a multiple of ``boundary`` steps; heron never pads: it
    # collects fixed unrolls and cuts them into sequences.
    "boundary": "unroll_length (heron collects fixed unrolls of that many steps and pads no "
    "trajectory; sequences for training are cut from them, ppo.sequence_length)",
}


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters. Defaults solve CartPole-v1 in under 100k steps."""

    learning_rate: float | str = scheduled(2e-3, 0.0, low_open=True)
    """Adam step size (a number or a schedule over optimiser steps)."""
    discount: float | str = scheduled(0.99, 0.0, 1.0)
    """Reward discount factor, in [0, 1] (Trax's gamma)."""
    gae_lambda: float | str = scheduled(0.95, 0.0, 1.0)
    """GAE mixing parameter lambda, in [0, 1] (Trax's lambda_)."""
    clip_range: float | str = scheduled(0.2, 0.0, low_open=True)
    """Clipping range of the probability ratio, > 0 (Trax's and rlax's epsilon)."""
    value_cost: float | str = scheduled(0.5, 0.0)
    """Weight of the value loss, >= 0 (Trax's value_weight)."""
    entropy_cost: float | str = scheduled(0.01, 0.0)
    """Weight of the entropy bonus, >= 0 (Trax's entropy_weight)."""
    normalize_advantages: bool = True
    """Normalise advantages to zero mean and unit std within each mini-batch."""
    max_grad_norm: float = number(0.5, 0.0, low_open=True, inf_is_off=True)
    """Global-norm gradient clipping; inf disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer (Trax's policy_and_value_optimizer)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<network>/<path> and vars/<network>/<path>."""
    unroll_length: int = integer(32, 1)
    """Environment steps collected per environment per iteration."""
    num_epochs: int = integer(4, 1)
    """Passes over each iteration's batch (Trax's n_optimizer_steps counts updates)."""
    batch_size: int = integer(256, 1)
    """Sequences per mini-batch; must divide the batch's sequences."""
    sequence_length: int = integer(1, 1)
    """Steps per training sequence (recurrent cores learn over sequences)."""
    target_kl: float = number(math.inf, 0.0, low_open=True)
    """Stop an iteration's updates once the estimated KL to the behaviour policy exceeds
    1.5 x target_kl (Trax's rule, Trax's default 0.01; heron's estimate is a true KL, never
    negative, where Trax's mean log-ratio can be); inf disables it."""
    initial_log_std: float = number(0.0)
    """Log standard deviation of the Gaussian policy over Box actions at the start (SB3's
    log_std_init; the zoo's MuJoCo settings start at -2); refused for discrete actions."""
    two_towers: bool = True
    """Separate policy and value networks; False shares torso and core (Trax's
    two_towers)."""
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    """Torso and core of each tower."""
    use_rollout_state: bool = False
    """Start each training sequence from the core state recorded when acting (ALF)."""
    vocab_size: int | None = integer(None, 2, 2**16, optional=True)
    """Trax's policy_and_value_vocab_size: None acts on raw observations (the network above);
    V in [2, 65536] (the embedding and the output layer grow with V: at 65536 and width 64,
    4M parameters each) serializes observations and actions into tokens of a V-word
    vocabulary and acts
    with one causal transformer with policy and value heads (ppo.tokens; two_towers and
    network do not apply). Box actions are refused."""
    tokens: TokenConfig = dataclasses.field(default_factory=TokenConfig)
    """The token network (with vocab_size): width, depth, heads, history, precision,
    observation_range."""

    renamed_fields: ClassVar[dict[str, str]] = RENAMED

    def __post_init__(self):
        check_config(self, "ppo")
        check(
            self.unroll_length % self.sequence_length == 0,
            f"ppo.unroll_length={self.unroll_length} is not a multiple of "
            f"ppo.sequence_length={self.sequence_length}: training sequences must not cross "
            "from one unroll into the next",
        )
        check_recurrence(self, "ppo")
        if self.vocab_size is None:
            check(
                self.tokens == TokenConfig(),
                "ppo.tokens.* configure the token network: add --ppo.vocab-size V",
            )
        else:
            tokens.check_token_config(self.tokens, "ppo.tokens")
            changed = [
                f"ppo.network.{f.name}={getattr(self.network, f.name)!r}"
                for f in dataclasses.fields(NetworkConfig)
                if getattr(self.network, f.name) != getattr(NetworkConfig(), f.name)
            ] + ([] if self.two_towers else ["ppo.two_towers=False"])
            check(
                not changed,
                f"ppo.vocab_size={self.vocab_size} acts with one transformer over the last "
                f"ppo.tokens.history steps (policy and value heads on it, sized by "
                f"ppo.tokens.*); {', '.join(changed)} configure the vector network: drop them",
            )


def _joint(log_ratio, mask):
    """Per-control log-ratios [..., k] -> the joint one [...] shaped like ``mask``
    (unchanged for one control)."""
    if log_ratio.ndim > mask.ndim:
        return jnp.sum(log_ratio, axis=-1)
    return log_ratio


class PPOState(NamedTuple):
    params: Any
    opt_state: Any
    update_step: jax.Array  # int32: optimiser steps taken
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


class PPOBatch(NamedTuple):
    """Per-step training inputs; [B, T] after GAE, [L, M] inside update."""

    observation: Any
    action: Any
    log_prob: jax.Array  # behaviour log pi(a|s)
    advantage: jax.Array
    value_target: jax.Array
    mask: jax.Array  # 0 at LAST steps, whose action was never executed
    first: jax.Array  # bool: FIRST steps, where a recurrent core resets
    rollout_state: Any = ()  # the core state recorded before acting, under use_rollout_state
    action_mask: Any = ()  # the legal actions, where the environment gives them


masked_mean = parallel.masked_mean


def normalize(advantage, mask):
    """Standardised over the whole mini-batch (all devices' shares of it)."""
    mean = parallel.device_mean(masked_mean(advantage, mask))
    std = jnp.sqrt(parallel.device_mean(masked_mean((advantage - mean) ** 2, mask)))
    return (advantage - mean) / (std + 1e-8)


def policy_value_network(spec: EnvSpec, config: PPOConfig):
    """Policy and value heads on two towers, or on one shared torso and core; outputs
    ``{"policy": head output, "value": [...]}`` either way."""
    shape, parts = spec.observation_shape, spec.observation_parts
    policy_head = PolicyHead(spec.action, initial_log_std=config.initial_log_std)
    value_head = DenseHead((), 1.0)
    if config.two_towers:
        return stack(
            {
                "policy": make_network(config.network, policy_head, shape, observation_parts=parts),
                "value": make_network(config.network, value_head, shape, observation_parts=parts),
            }
        )
    heads = Heads({"policy": policy_head, "value": value_head})
    return make_network(config.network, heads, shape, observation_parts=parts)


def gae_batch(config: PPOConfig, update_step, experience: Experience, controls=None) -> PPOBatch:
    """Experience [B, T+1] -> PPOBatch [B, T] (step T only bootstraps): GAE advantages and
    value targets at the discount and lambda in effect at ``update_step``."""
    hyper = learning.Hyperparameters(config, ("discount", "gae_lambda"))
    controls = hyper.initial_controls() if controls is None else controls
    discount = hyper("discount", update_step, controls)
    gae_lambda = hyper("gae_lambda", update_step, controls)
    values = extra(experience, "value", "ppo", "the behaviour policy's value estimates")
    is_last = (experience.step_type == StepType.LAST).astype(jnp.float32)
    # The transition out of a LAST step is a reset, not a transition: cut the trace there.
    advantage = jax.vmap(ops.gae)(
        experience.reward[:, 1:],
        discount * experience.discount[:, 1:],
        values,
        gae_lambda * (1.0 - is_last[:, 1:]),
    )
    rollout_state = (
        extra(experience, ROLLOUT_STATE, "ppo", "use_rollout_state")
        if config.use_rollout_state
        else ()
    )
    return PPOBatch(
        observation=jax.tree.map(lambda x: x[:, :-1], experience.observation),
        action=jax.tree.map(lambda a: a[:, :-1], experience.action),
        log_prob=extra(experience, "log_prob", "ppo", "the behaviour log-probabilities")[:, :-1],
        advantage=advantage,
        value_target=advantage + values[:, :-1],
        mask=1.0 - is_last[:, :-1],
        first=experience.step_type[:, :-1] == StepType.FIRST,
        rollout_state=jax.tree.map(lambda x: x[:, :-1], rollout_state),
        action_mask=jax.tree.map(lambda x: x[:, :-1], experience.action_mask),
    )


def clipped_surrogate(log_ratio, advantage, clip_range):
    """PPO's clipped surrogate per step, each control's ratio clipped on its own (as Trax's
    rewards-to-actions map implies) and the controls averaged.

    Args:
      log_ratio: log pi(a|s) - log mu(a|s), [T, B] for one control or [T, B, k] per control.
      advantage: [T, B].
      clip_range: the clipping range (rlax's epsilon).

    Returns:
      [T, B]; for one control ``min(r A, clip(r, 1 - eps, 1 + eps) A)``.
    """
    if log_ratio.ndim == advantage.ndim:
        log_ratio = log_ratio[..., None]
    advantage = advantage[..., None]  # each step's advantage, on each of its controls
    ratio = jnp.exp(log_ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return jnp.mean(jnp.minimum(ratio * advantage, clipped_ratio * advantage), axis=-1)


def _log_prob(dist, action):
    """Per-control log-probabilities [..., k] of several controls, else joint [...]."""
    if isinstance(dist, distributions.MultiCategorical):
        return dist.log_prob_per_control(action)
    return dist.log_prob(action)


def vector_model(spec: EnvSpec, config: PPOConfig) -> PolicyModel:
    network = policy_value_network(spec, config)

    def step(params, timestep: TimeStep, carry):
        new_carry, out = network.step(params, carry, timestep.observation, timestep.is_first())
        dist = distributions.make(spec.action, out["policy"], action_mask=timestep.action_mask)
        return new_carry, out, dist

    def act(params, timestep: TimeStep, carry, key):
        new_carry, out, dist = step(params, timestep, carry)
        if isinstance(dist, distributions.MultiCategorical):
            action = dist.sample(key)
            log_prob = dist.log_prob_per_control(action)
        else:
            action, log_prob = dist.sample_and_log_prob(key)
        extras = {"log_prob": log_prob, "value": out["value"]}
        return action, new_carry, {**extras, **learning.rollout_extras(config, carry)}

    def policy(params, timestep: TimeStep, carry, key, temperature):
        carry, _, dist = step(params, timestep, carry)
        return dist.sample(key, temperature), carry

    def outputs(params, observation, first, start):
        return network.unroll(params, start, observation, first)[1]

    return PolicyModel(
        network.init, lambda b: network.initial_state((b,)), act, policy, outputs, lambda e: e
    )


def make_ppo(spec: EnvSpec, config: PPOConfig, devices=None) -> Agent:
    warn_zero_start(config, "ppo")
    if config.initial_log_std != 0.0 and (spec.action.is_discrete or config.vocab_size):
        raise ConfigError(
            f"ppo.initial_log_std={config.initial_log_std:g} is the spread of a Gaussian over "
            "Box actions; this policy's actions are discrete (leave it at 0)"
        )
    if spec.action_mask and config.vocab_size is not None:
        raise ConfigError(
            f"ppo.vocab_size={config.vocab_size} (a token policy) does not act on action "
            "masks, and this environment gives them: drop --ppo.vocab-size"
        )
    if config.vocab_size is None:
        model = vector_model(spec, config)
    else:
        model = token_model(spec, config.vocab_size, config.tokens)
    hyper = learning.Hyperparameters(config, SCHEDULED)
    optimizer = learning.optimizer(config, eps=1e-5)
    use_rollout_state = config.use_rollout_state

    def init(key) -> PPOState:
        params = model.init(key)
        return PPOState(
            params=params,
            opt_state=optimizer.init(params),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def act(state: PPOState, timestep: TimeStep, carry, key):
        return model.act(state.params, timestep, carry, key)

    def policy(state: PPOState, timestep: TimeStep, carry, key, temperature):
        return model.policy(state.params, timestep, carry, key, temperature)

    def outputs(params, batch: PPOBatch):
        """The network's outputs on sequences [L, M] from their start states."""
        if use_rollout_state:
            start = jax.tree.map(lambda x: x[0], batch.rollout_state)
        else:
            start = model.initial_carry(batch.first.shape[1])
        return model.outputs(params, batch.observation, batch.first, start)

    def approx_kl(params, batch: PPOBatch):
        """E[(r - 1) - log r], r = pi / mu: the approximate KL to the behaviour policy."""
        policy = outputs(params, batch)["policy"]
        dist = distributions.make(spec.action, policy, action_mask=batch.action_mask)
        log_ratio = _joint(_log_prob(dist, batch.action) - batch.log_prob, batch.mask)
        return parallel.device_mean(masked_mean(jnp.expm1(log_ratio) - log_ratio, batch.mask))

    def loss(params, batch: PPOBatch, step, controls):
        """The PPO loss on a mini-batch of sequences [L, M]."""
        clip_range = hyper("clip_range", step, controls)
        out = outputs(params, batch)
        dist = distributions.make(spec.action, out["policy"], action_mask=batch.action_mask)
        log_ratio = _log_prob(dist, batch.action) - batch.log_prob  # [L, M] or [L, M, k]
        advantage = (
            normalize(batch.advantage, batch.mask)
            if config.normalize_advantages
            else batch.advantage
        )
        surrogate = clipped_surrogate(log_ratio, advantage, clip_range)
        ratio = jnp.exp(log_ratio)
        joint = _joint(log_ratio, batch.mask)
        per_control = jnp.mean if log_ratio.ndim > batch.mask.ndim else (lambda x, axis: x)
        policy_loss = -masked_mean(surrogate, batch.mask)
        value_loss = 0.5 * masked_mean((out["value"] - batch.value_target) ** 2, batch.mask)
        entropy = masked_mean(dist.entropy(), batch.mask)
        total = (
            policy_loss
            + hyper("value_cost", step, controls) * value_loss
            - hyper("entropy_cost", step, controls) * entropy
        )
        metrics = {
            "loss/total": total,
            "loss/policy": policy_loss,
            "loss/value": value_loss,
            "loss/entropy": entropy,
            "ppo/approx_kl": masked_mean((jnp.exp(joint) - 1.0) - joint, batch.mask),
            "ppo/clip_fraction": masked_mean(
                per_control((jnp.abs(ratio - 1.0) > clip_range).astype(jnp.float32), axis=-1),
                batch.mask,
            ),
        }
        return total, metrics

    def update(state: PPOState, batch: PPOBatch, key):
        """One optimiser step on a mini-batch of sequences [L, M]."""
        del key
        step, controls = state.update_step, state.controls
        grads, metrics = jax.grad(loss, has_aux=True)(state.params, batch, step, controls)
        grads, metrics = parallel.device_mean((grads, metrics))
        metrics.update(hyper.metrics(step, controls))
        params, opt_state = optimizer.step(
            grads, state.opt_state, state.params, hyper("learning_rate", step, controls)
        )
        metrics.update(learning.gradient_metrics(config, {"": (grads, state.params)}))
        new_state = PPOState(
            params=params, opt_state=opt_state, update_step=step + 1, controls=controls
        )
        return new_state, metrics

    update = learning.data_parallel(update, devices or jax.devices(), "ppo", config.batch_size)

    def learn(state: PPOState, replay_, replay_state, key):
        sample_key, update_key = jax.random.split(key)
        experience, replay_state = replay_.sample(replay_state, sample_key)
        experience = model.inputs(experience)
        batch = gae_batch(config, state.update_step, experience, state.controls)
        stop = None
        if not math.isinf(config.target_kl):
            whole = learning.time_major(batch)  # the KL is measured on every step of the batch

            def stop(state, metrics):
                return approx_kl(state.params, whole) > 1.5 * config.target_kl

        sequences = learning.sequences(batch, config.sequence_length, config.sequence_length)
        state, metrics = learning.minibatch_epochs(
            update,
            state,
            sequences,
            update_key,
            num_epochs=config.num_epochs,
            batch_size=config.batch_size,
            stop=stop,
        )
        return state, replay_state, metrics

    def make_replay(num_envs: int, name: str | None = None, **sizes):
        name = replay.check_name(name or "one_time", ("one_time", "cycle_one_time"), "ppo")
        sizes = replay.ReplaySizes(
            **{"num_envs": num_envs, "unroll_length": config.unroll_length, **sizes}
        )
        lanes = (
            sizes.learn_queue_cap * (num_envs // sizes.num_actors)
            if name != "one_time"
            else num_envs
        )
        learning.check_tiling("ppo", config.unroll_length, lanes, config, overlap=False)
        return replay.make_replay(name, sizes)

    return Agent(
        name="ppo",
        config=config,
        spec=spec,
        unroll_length=config.unroll_length,
        init=init,
        initial_carry=model.initial_carry,
        act=act,
        policy=policy,
        make_replay=make_replay,
        learn=learn,
        update=update,
        params=lambda state: state.params,
        replayers=("one_time", "cycle_one_time"),
    )


register("ppo", PPOConfig, make_ppo, masks_actions=True)
