"""The agent contract: a bundle of pure functions the driver can jit, scan and vmap.

    agent = heron.agents.make("ppo", spec, config)
    state = agent.init(key)
    carry = agent.initial_carry(batch_size)
    action, carry, extras = agent.act(state, timestep, carry, key, mode="rollout")
    batch = agent.preprocess(state, experience)     # experience [B, T+1]: last step bootstraps
    state, metrics = agent.update(state, batch, key)  # batch [L, M] sequences, time-major

``act`` with ``mode="predict"`` takes a ``temperature`` (0 = greedy). The training schedule
(how much to collect, how many passes of which mini-batches) is part of the agent, since it
is part of the algorithm; the driver executes it the same way for every agent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from heron.schedules import Schedule, ScheduleError, as_schedule
from heron.specs import EnvSpec


@dataclasses.dataclass(frozen=True)
class TrainSchedule:
    """ALF's ``train(num_updates, mini_batch_size, mini_batch_length, clear_replay_buffer)``.

    unroll_length: env steps collected per environment per iteration.
    num_updates: passes over the replayed experience per iteration.
    mini_batch_size: sequences per optimiser step.
    mini_batch_length: steps per sequence (1 = independent transitions).
    replay: replayer name; ``one_time`` replays everything once collected, then clears it;
      ``uniform`` keeps ``replay_capacity`` steps per env and samples fresh mini-batches.
    """

    unroll_length: int
    num_updates: int
    mini_batch_size: int
    mini_batch_length: int = 1
    replay: str = "one_time"
    mini_batch_size_field: str = "mini_batch_size"  # the config field, for error messages
    replay_capacity: int = 0  # steps kept per environment by a sampling replay
    min_replay_size: int = 0  # transitions stored before the first update
    replay_ratio: float | None = None  # updates per collected env step (sets num_updates)
    recurrent: bool = False  # the agent carries state from step to step
    use_rollout_state: bool = False  # record that state in the experience and train from it


def replay_schedule(
    name: str,
    config,
    sequence_length: int,
    recurrent: bool = False,
    use_rollout_state: bool = False,
) -> TrainSchedule:
    """The schedule of an agent trained from the ``uniform`` replay: ``config`` gives
    unroll_length, mini_batch_size, replay_capacity, min_replay_size and replay_ratio;
    updates start once ``min_replay_size`` steps (and at least one sequence) are stored."""
    return TrainSchedule(
        unroll_length=config.unroll_length,
        num_updates=1,  # set from replay_ratio by the driver
        mini_batch_size=config.mini_batch_size,
        mini_batch_length=sequence_length,
        replay="uniform",
        mini_batch_size_field=f"{name}.mini_batch_size",
        replay_capacity=config.replay_capacity,
        min_replay_size=max(config.min_replay_size, sequence_length),
        replay_ratio=config.replay_ratio,
        recurrent=recurrent,
        use_rollout_state=use_rollout_state and recurrent,
    )


@dataclasses.dataclass(frozen=True)
class Agent:
    name: str
    config: Any
    spec: EnvSpec
    schedule: TrainSchedule
    init: Callable
    initial_carry: Callable
    act: Callable
    preprocess: Callable
    update: Callable
    params: Callable  # state -> the parameters that define the policy (for digests, eval)
    # metrics -> bool: skip this iteration's remaining updates (None: never stop early)
    stop_updates: Callable | None = None


class ConfigError(ValueError):
    """A configuration value out of its allowed range."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def check_scheduled(
    name: str,
    value,
    low: float = -math.inf,
    high: float = math.inf,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> Schedule:
    """Parses a float-or-schedule field and checks every value it takes lies in the range."""
    try:
        schedule = as_schedule(value)
    except ScheduleError as error:
        raise ConfigError(f"{name}: {error}") from error
    smallest, largest = schedule.value_range()
    above = smallest >= low if low_inclusive else smallest > low
    below = largest <= high if high_inclusive else largest < high
    if not (above and below):
        if math.isinf(high):
            allowed = f"{'>=' if low_inclusive else '>'} {low:g}"
        else:
            allowed = (
                f"in {'[' if low_inclusive else '('}{low:g}, {high:g}"
                f"{']' if high_inclusive else ')'}"
            )
        got = (
            value if schedule.is_constant else f"{value} (values from {smallest:g} to {largest:g})"
        )
        raise ConfigError(f"{name} must be {allowed}, got {got}")
    return schedule
