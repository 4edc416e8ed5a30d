"""The networks of the actor-critic agents: critics Q(s, a) on the observation beside the
encoded action (CRR, SAC, SVG0, TD3), and a policy with its critics: tanh-Gaussian (SAC,
SVG0) or deterministic (TD3). Observations reach every network untouched: its torso reads
them (``heron.networks.network``), so the conv torso serves these agents as it serves the
rest.

Sequences are time-major [S, B] as the agents' updates read them. With a recurrent core
every network unrolls over a sequence from its start state; ``Critics.states`` are the
critics' states before each step of their unroll on the actions taken, from which
``Critics.step`` and ``Critics.candidates`` evaluate other actions (the policy's samples).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from heron import parallel
from heron.agents.actions import action_size, encode_action, from_box, tile, to_box
from heron.agents.learning import restart_masks
from heron.networks import (
    DenseHead,
    Network,
    NetworkConfig,
    PolicyHead,
    distributions,
    make_network,
)
from heron.specs import ActionSpec, EnvSpec
from heron.types import Experience, StepType, TimeStep


def tanh_gaussian(head_output) -> distributions.TanhGaussian:
    return distributions.TanhGaussian(head_output["mean"], head_output["log_std"])


def sample_with_log_prob(head_output, key, count):
    """``count`` reparameterised tanh-Gaussian samples per distribution and their log-probs:
    {mean, log_std} [T, B, d] -> actions [count, T, B, d], log_probs [count, T, B]. Each
    sequence (b) draws from its own key, the same draws however the B sequences are split
    over devices."""
    keys = parallel.example_keys(key, head_output["mean"].shape[1])

    def one_sequence(params, sequence_key):  # [T, d] -> [count, T, d], [count, T]
        return tanh_gaussian(params).sample_and_log_prob(sequence_key, sample_shape=(count,))

    return jax.vmap(one_sequence, in_axes=(1, 0), out_axes=(2, 2))(head_output, keys)


@dataclasses.dataclass(frozen=True)
class Critics:
    """Q networks on observations beside encoded actions (``actions.encode_action``), the
    network's extra inputs: one ``network`` (``count`` None), or ``count`` copies of it
    vmapped over stacked parameters, states and outputs [count, ...] (twin critics)."""

    network: Network
    action_spec: ActionSpec
    count: int | None = None

    @property
    def recurrent(self) -> bool:
        return self.network.recurrent

    def input(self, observation, action):
        """The critic network's input: (observation, encoded action)."""
        return observation, encode_action(self.action_spec, action)

    def _each(self, function):
        """``function(params, state, x, first)`` of every critic on the same inputs."""
        if self.count is None:
            return function
        return jax.vmap(function, in_axes=(0, 0, None, None))

    def init(self, key):
        if self.count is None:
            return self.network.init(key)
        return jax.vmap(self.network.init)(jax.random.split(key, self.count))

    def initial_state(self, batch_shape: tuple[int, ...]):
        if self.count is None:
            return self.network.initial_state(batch_shape)
        return self.network.initial_state((self.count, *batch_shape))

    def to_carry(self, state):
        """Stacked critics' states [count, B, ...] as an agent's carry keeps them,
        batch-major [B, count, ...] like every other carry (recorded with the steps)."""
        if self.count is None:
            return state
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), state)

    def from_carry(self, state):
        """``to_carry``'s inverse: [B, count, ...] -> [count, B, ...]."""
        return self.to_carry(state)

    def step(self, params, state, observation, action, first):
        """(states after, Q) at one step, or at every step of [T, ...] from the states before
        each (``states``)."""
        return self._each(self.network.step)(params, state, self.input(observation, action), first)

    def unroll(self, params, start, observation, action, first):
        """(final states, Q [T, ...], states before each step) over sequences [T, ...]."""
        x = self.input(observation, action)
        return self._each(self.network.unroll)(params, start, x, first)

    def states(self, params, start, observation, action, first):
        """The states before each step of the unroll on ``action`` [T, ...]; () for
        feed-forward critics."""
        if not self.recurrent:
            return ()
        return self.unroll(params, start, observation, action, first)[2]

    def at_steps(self, states, steps: slice):
        """``states`` before the steps ``steps`` of their sequences."""
        if self.count is None:
            return jax.tree.map(lambda s: s[steps], states)
        return jax.tree.map(lambda s: s[:, steps], states)

    def candidates(self, params, states, observation, first, actions):
        """(states after, Q) of N candidate actions [N, ...] per step, each from the state
        before it (observation, first and states without the candidates' axis)."""
        count = jax.tree.leaves(actions)[0].shape[0]

        def each(params, states, observation, first):
            x = self.input(tile(count, observation), actions)
            return self.network.step(params, tile(count, states), x, tile(count, first))

        return self._each(each)(params, states, observation, first)


class Sequences(NamedTuple):
    """A sampled batch as the losses read it: [S, B] time-major, S = T+1."""

    observation: Any  # [S, B, *obs] as the environment gives them
    action: Any  # [S, B, d] in [-1, 1]
    first: Any  # bool [S, B]
    mask: Any  # [T, B]: 0 for the restart transitions (``heron.ops.restart_mask``)
    reward: Any  # [S, B]
    discount: Any  # [S, B]
    start: Any  # {network: core state the unroll starts from}


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """A policy and its critics, on Box actions squashed to [-1, 1]^d: tanh-Gaussian (SAC,
    SVG0; ``act`` and ``evaluate``), or any other head acting through ``act_with`` and
    ``evaluate_with`` (TD3's deterministic one)."""

    spec: EnvSpec
    policy: Network
    critics: Critics

    def initial_carry(self, batch_size: int) -> dict:
        return {
            "policy": self.policy.initial_state((batch_size,)),
            "critic": self.critics.to_carry(self.critics.initial_state((batch_size,))),
        }

    def act(self, policy_params, critic_params, timestep: TimeStep, carry, key, behaviour=None):
        """One step of the behaviour policy (``behaviour(head output)`` -> distribution,
        default the policy's tanh-Gaussian): (action in the Box, its log-probability, the
        carry with the policy's and the critics' states after it)."""

        def sample(head_output):
            return (behaviour or tanh_gaussian)(head_output).sample_and_log_prob(key)

        return self.act_with(policy_params, critic_params, timestep, carry, sample)

    def act_with(self, policy_params, critic_params, timestep: TimeStep, carry, choose):
        """One step of a behaviour policy that ``choose(head output)`` -> (action in
        [-1, 1]^d, what it reports) makes: (action in the Box, the report, the carry with
        the policy's and the critics' states after it)."""
        observation, first = timestep.observation, timestep.is_first()
        policy_state, head_output = self.policy.step(
            policy_params, carry["policy"], observation, first
        )
        action, report = choose(head_output)
        new_carry = dict(carry, policy=policy_state)
        if self.critics.recurrent:  # every network's memory follows the steps taken
            state = self.critics.from_carry(carry["critic"])
            state = self.critics.step(critic_params, state, observation, action, first)[0]
            new_carry["critic"] = self.critics.to_carry(state)
        return to_box(self.spec.action, action), report, new_carry

    def evaluate(self, policy_params, timestep: TimeStep, carry, key, temperature):
        """The policy at ``temperature`` (0: its mode): (action in the Box, carry)."""

        def sample(head_output):
            return tanh_gaussian(head_output).sample(key, temperature)

        return self.evaluate_with(policy_params, timestep, carry, sample)

    def evaluate_with(self, policy_params, timestep: TimeStep, carry, choose):
        """The action ``choose(head output)`` in [-1, 1]^d, in the Box, and the carry with
        the policy's state after it (the critics' memory is not needed to evaluate)."""
        policy_state, head_output = self.policy.step(
            policy_params, carry["policy"], timestep.observation, timestep.is_first()
        )
        action = choose(head_output)
        return to_box(self.spec.action, action), dict(carry, policy=policy_state)

    def sequences(self, batch: Experience, start) -> Sequences:
        first = batch.step_type == StepType.FIRST
        return Sequences(
            observation=batch.observation,
            action=from_box(self.spec.action, batch.action),
            first=first,
            mask=restart_masks(first),
            reward=batch.reward,
            discount=batch.discount,
            start=start,
        )

    def head_outputs(
        self, params, inputs: Sequences, name: str = "policy", steps: slice = slice(None)
    ):
        """Head outputs [len(steps), B] of a policy-shaped network (the policy, or SVG0's
        prior) at ``steps`` of the sequences (default all S): a recurrent network unrolls
        from its start state ``inputs.start[name]`` and keeps those steps; a feed-forward
        one reads only them."""
        if not self.policy.recurrent:
            return self.policy.step(params, (), inputs.observation[steps], inputs.first[steps])[1]
        outputs = self.policy.unroll(params, inputs.start[name], inputs.observation, inputs.first)
        return jax.tree.map(lambda x: x[steps], outputs[1])

    def critic_unroll(self, params, inputs: Sequences):
        """(Q at the taken actions [..., S, B], the critics' states before each step)."""
        start = self.critics.from_carry(inputs.start["critic"])
        _, q, states = self.critics.unroll(
            params, start, inputs.observation, inputs.action, inputs.first
        )
        return q, states

    def critic_states(self, params, inputs: Sequences):
        """The critics' states before each step of their unroll on the taken actions; ()
        for feed-forward critics."""
        start = self.critics.from_carry(inputs.start["critic"])
        return self.critics.states(params, start, inputs.observation, inputs.action, inputs.first)


def policy_and_critic(
    spec: EnvSpec,
    config: NetworkConfig,
    critic_head: nn.Module,
    policy_head: nn.Module | None = None,
) -> tuple[Network, Network]:
    """A policy of ``config``'s shape on observations ending in ``policy_head`` (default
    ``PolicyHead``, state-dependent std) and a critic of that shape ending in
    ``critic_head`` on observations beside encoded actions (``Critics.input``)."""
    shape, parts = spec.observation_shape, spec.observation_parts
    if policy_head is None:
        policy_head = PolicyHead(spec.action, std="state")
    policy = make_network(config, policy_head, shape, observation_parts=parts)
    critic = make_network(
        config, critic_head, shape, action_size(spec.action), observation_parts=parts
    )
    return policy, critic


def networks(
    spec: EnvSpec,
    config: NetworkConfig,
    num_critics: int | None,
    policy_head: nn.Module | None = None,
) -> ActorCritic:
    """The policy (default tanh-Gaussian; else ending in ``policy_head``) and scalar critics
    of ``config``'s shape: ``num_critics`` stacked, or one (None)."""
    policy, critic = policy_and_critic(spec, config, DenseHead((), None), policy_head)
    return ActorCritic(spec, policy, Critics(critic, spec.action, num_critics))
