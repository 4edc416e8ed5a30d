"""The token policy-and-value network as an agent acts with it (Trax's PPO policy
"operating on serialized representation"): observations and actions serialized into tokens
of a ``vocab_size``-word vocabulary, one causal transformer (``tokens.TokenPolicyValue``)
reading the last ``history`` steps, each action control sampled in turn.

A ``PolicyModel`` is what PPO acts and learns with; ``heron.agents.ppo`` has the vector one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from heron import serialization
from heron.networks import distributions, tokens
from heron.networks.network import flat_observation
from heron.networks.tokens import TokenConfig
from heron.specs import EnvSpec
from heron.types import Experience, TimeStep, extra


class PolicyModel(NamedTuple):
    """How PPO acts and evaluates its outputs: on raw observations (a vector network) or on
    serialized histories (the token network).

    act(params, timestep, carry, key) -> (action, carry, extras), extras {"log_prob" (per
    control with several), "value", and what training reads instead of observations};
    policy(params, timestep, carry, key, temperature) -> (action, carry);
    outputs(params, observation [L, M, ...], first [L, M], start) -> {"policy", "value"};
    inputs(experience) -> the experience training reads."""

    init: Callable
    initial_carry: Callable
    act: Callable
    policy: Callable
    outputs: Callable
    inputs: Callable


TOKENS, TOKEN_VALID = "tokens", "token_valid"  # the extras of a token policy's windows


def token_model(spec: EnvSpec, vocab_size: int, config: TokenConfig) -> PolicyModel:
    """The token policy-and-value network: the actor's carry keeps the last
    ``tokens.history`` steps as tokens; each control is sampled in turn from the logits read
    before its token (one pass per control); the window it acted on (its actions included)
    is recorded, so training re-reads exactly what the actor saw."""
    action_spec = spec.action
    observation_ser, action_ser, layout = tokens.serializations(
        (math.prod(spec.observation_shape),),
        action_spec,
        vocab_size,
        config,
        spec.observation_categories,
    )
    module = tokens.TokenPolicyValue(vocab_size, layout, action_spec.n_actions, config)
    multi = action_spec.multi_control

    def head(out):
        """Logits [..., A, n] -> the distribution's layout ([..., n] for one Discrete)."""
        policy = out["policy"] if multi else out["policy"][..., 0, :]
        return {"policy": policy, "value": out["value"]}

    def init(key):
        history = tokens.initial_history(layout, (1,))
        return module.init(key, *tokens.window(layout, history))

    def step(params, timestep: TimeStep, carry, key, temperature):
        observation = flat_observation(spec.observation_shape, timestep.observation)
        if spec.observation_categories is not None:  # Discrete: each category its own token
            observation = jnp.rint(observation).astype(jnp.int32)
        history = tokens.push(
            carry, serialization.serialize(observation_ser, observation), timestep.is_first()
        )
        keys = jax.random.split(key, layout.action_tokens)
        chosen, log_probs, value = [], [], None
        for control in range(layout.action_tokens):  # one pass per control, in order
            out = module.apply(params, *tokens.window(layout, history))
            value = out["value"] if value is None else value
            dist = distributions.Categorical(out["policy"][..., control, :])
            token = dist.sample(keys[control], temperature)
            chosen.append(token)
            log_probs.append(dist.log_prob(token))
            current = history.actions[..., -1, :].at[..., control].set(token)
            history = tokens.with_actions(history, current)
        action = jnp.stack(chosen, -1) if multi else chosen[0]
        log_prob = jnp.stack(log_probs, -1) if multi else log_probs[0]
        window, valid = tokens.window(layout, history)
        extras = {"log_prob": log_prob, "value": value, TOKENS: window, TOKEN_VALID: valid}
        return action, history, extras

    def act(params, timestep: TimeStep, carry, key):
        return step(params, timestep, carry, key, 1.0)

    def policy(params, timestep: TimeStep, carry, key, temperature):
        return step(params, timestep, carry, key, temperature)[:2]

    def outputs(params, observation, first, start):
        del first, start  # every window carries its own history
        return head(module.apply(params, *observation))

    def inputs(experience: Experience) -> Experience:
        window = extra(
            experience, TOKENS, "the token policy", "the token windows the actor acted on"
        )
        valid = extra(
            experience, TOKEN_VALID, "the token policy", "the token windows the actor acted on"
        )
        return experience._replace(observation=(window, valid))

    return PolicyModel(
        init, lambda b: tokens.initial_history(layout, (b,)), act, policy, outputs, inputs
    )
