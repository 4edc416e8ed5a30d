"""The shared vocabulary: step types, time steps and experience, all pytrees.

Conventions (dm_env / ALF): an episode is FIRST, MID, ..., MID, LAST. The reward and
discount of a step belong to the transition that *arrived* at it, so a FIRST step has
reward 0 and discount 1. The discount of a LAST step is 0 when the episode terminated and
1 when it was truncated (a time limit), so a learner bootstraps from the value of the
LAST step's own observation. The action chosen at a LAST step is never executed: the
environment resets instead and the next step is FIRST.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp


class StepType:
    """Integer codes of the position of a step in its episode."""

    FIRST = 0
    MID = 1
    LAST = 2


class TimeStep(NamedTuple):
    """What an environment returns, batched over environments: fields are [B, ...]."""

    step_type: Any  # int32 [B]
    reward: Any  # float32 [B]
    discount: Any  # float32 [B]: 0 only where the episode terminated
    observation: Any  # [B, *obs_shape]
    # bool [B, n] ([B, k, n] for k controls): the actions legal at this step, where the
    # environment says (EnvSpec.action_mask); () where it does not
    action_mask: Any = ()

    def is_first(self):
        return self.step_type == StepType.FIRST

    def is_last(self):
        return self.step_type == StepType.LAST


class Experience(NamedTuple):
    """One step of collected experience: the time step, the action taken there and what the
    behaviour policy reported about it (``extras``, e.g. log-probabilities and values).

    ``state`` holds the agent's recurrent state before acting when rollout states are kept
    (``()`` otherwise); ``prev_action`` the action taken at the step before, for agents that
    ask for it (``Agent.uses_prev_action``; ``()`` otherwise). Leaves are [B, T, ...] in
    replay and [T, B, ...] inside updates.
    """

    step_type: Any
    reward: Any
    discount: Any
    observation: Any
    action: Any
    extras: Any = ()
    state: Any = ()
    prev_action: Any = ()  # ALF's: the action of the step before (zeros at FIRST steps)
    action_mask: Any = ()  # the legal actions at this step (TimeStep.action_mask)

    @classmethod
    def from_timestep(
        cls, timestep: TimeStep, action, extras=(), state=(), prev_action=()
    ) -> Experience:
        return cls(
            step_type=timestep.step_type,
            reward=timestep.reward,
            discount=timestep.discount,
            observation=timestep.observation,
            action=action,
            extras=extras,
            state=state,
            prev_action=prev_action,
            action_mask=timestep.action_mask,
        )

    @property
    def timestep(self) -> TimeStep:
        return TimeStep(
            self.step_type, self.reward, self.discount, self.observation, self.action_mask
        )


def first_step(observation, batch_shape, action_mask=()) -> TimeStep:
    """A FIRST time step for freshly reset environments."""
    return TimeStep(
        step_type=jnp.full(batch_shape, StepType.FIRST, jnp.int32),
        reward=jnp.zeros(batch_shape, jnp.float32),
        discount=jnp.ones(batch_shape, jnp.float32),
        observation=observation,
        action_mask=action_mask,
    )


class MissingExtrasError(ValueError):
    """Experience without what the behaviour policy must have recorded."""


def extra(experience, name: str, agent: str, why: str):
    """``experience.extras[name]``, or a clear error when the experience lacks it (e.g. a
    dataset collected by another policy)."""
    extras = experience.extras
    if not isinstance(extras, dict) or name not in extras:
        names = sorted(extras) if isinstance(extras, dict) else []
        raise MissingExtrasError(
            f"{agent} needs extras[{name!r}] in its experience ({why}); this experience has "
            f"extras {names}"
        )
    return extras[name]
