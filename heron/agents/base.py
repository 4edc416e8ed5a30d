"""The agent contract: a bundle of pure functions the driver can jit, scan and vmap.

    agent = heron.agents.make("crr", spec, config)
    state = agent.init(key)
    carry = agent.initial_carry(batch_size)                           # () feed-forward
    action, carry, extras = agent.act(state, timestep, carry, key)    # collecting
    action, carry = agent.policy(state, timestep, carry, key, temperature)  # 0: greedy
    replay = agent.make_replay(num_envs)                              # its replayer
    state, replay_state, metrics = agent.learn(state, replay, replay_state, key)
    state = agent.observe_steps(state, count)                         # optional: env steps
    controls = agent.controls(state)                                  # a controller's multipliers
    state = agent.with_controls(state, controls)

A model without a policy (the world model) has ``act`` and ``policy`` None: it learns from
a dataset only, and ``scoring`` evaluates it on episodes of that dataset held out of its
replay, where an agent with a policy is evaluated in the environment.

The agent decides *how* it learns: ``learn`` takes what it needs from the replay (a whole
unroll, or sampled sequences) and runs its updates (epochs of mini-batches, or one sampled
update) with the helpers of ``heron.agents.learning``. The driver decides *when*: it
collects ``unroll_length`` steps per environment, adds them to the replay, and calls
``learn`` while ``replay.can_sample`` holds.

``update`` is one optimiser step on a mini-batch of sequences, time-major [L, M], already
split over the devices when there are several; ``learn`` composes it.

``extras`` is a dict of what the behaviour policy reports (log-probabilities, values) and,
under ``use_rollout_state``, the recurrent state before acting (``extras["rollout_state"]``),
from which training sequences start.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from heron.configs import ConfigError, check, integer, number, validate
from heron.specs import EnvSpec
from heron.types import Experience, MissingExtrasError, TimeStep, extra

ROLLOUT_STATE = "rollout_state"  # the extras key of the recorded recurrent state


# The pieces of the contract, typed (as Acme's networks): states, carries and metrics are
# pytrees; timesteps [B] and sequences [L, M] are heron.types' TimeStep and Experience.
State = Any  # parameters, optimiser states, targets, counters, control multipliers
Carry = Any  # the networks' recurrent state while acting; () for feed-forward ones
Metrics = dict[str, Any]
Key = jax.Array
InitFn = Callable[[Key], State]
InitialCarryFn = Callable[[int], Carry]
ActFn = Callable[[State, TimeStep, Carry, Key], tuple[Any, Carry, dict]]
PolicyFn = Callable[[State, TimeStep, Carry, Key, float], tuple[Any, Carry]]
UpdateFn = Callable[[State, Experience, Key], tuple[State, Metrics]]
MakeReplayFn = Callable[..., Any]  # (num_envs, name=None, **sizes) -> Replay
LearnFn = Callable[[State, Any, Any, Key], tuple[State, Any, Metrics]]
ControlsFn = Callable[[State], dict[str, jax.Array]]
WithControlsFn = Callable[[State, dict[str, jax.Array]], State]
ScoreFn = Callable[[State, Experience], Metrics]


class Scoring(NamedTuple):
    """How a model without a policy is evaluated: ``holdout`` of its dataset's episodes
    (a seeded share, at least one) are kept out of the replay, and at each evaluation
    ``score(state, steps [N])`` (those episodes one after another, as the replay would keep
    them) gives its metrics, of which ``headline`` is what an evaluation line reports as
    its ``return_mean``, described as ``quantity``."""

    holdout: float
    score: ScoreFn
    headline: str
    quantity: str


def state_controls(state: State) -> dict[str, jax.Array]:
    """The control multipliers an agent keeps in its state's ``controls`` field."""
    return state.controls


def with_state_controls(state: State, controls: dict[str, jax.Array]) -> State:
    return state._replace(controls=controls)


@dataclasses.dataclass(frozen=True)
class Agent:
    name: str
    config: Any
    spec: EnvSpec
    unroll_length: int  # steps collected per environment between two learning phases
    init: InitFn
    initial_carry: InitialCarryFn  # batch_size -> carry
    act: ActFn | None  # (state, timestep [B], carry, key) -> (action, carry, extras)
    policy: PolicyFn | None  # (state, timestep [B], carry, key, temperature) -> (action, carry)
    update: UpdateFn  # (state, sequences [L, M] time-major, key) -> (state, metrics)
    make_replay: MakeReplayFn
    learn: LearnFn  # (state, replay, replay_state, key) -> (state, replay_state, metrics)
    params: Callable[[State], Any]  # the parameters that define the policy (digests, init-from)
    replayers: tuple[str, ...]  # the replayers it learns from; the first is its default
    # metrics (one iteration's means, one seed) -> {topic: warning}; each topic is printed
    # once a run, whatever its figures
    advise: Callable[[dict], dict[str, str]] | None = None
    # (state, count) -> state: told, after each collection and before learning, how many
    # environment steps entered the replay; agents whose schedules run over environment
    # steps (DQN's epsilon) count them in their state. None: not told.
    observe_steps: Callable[[State, int], State] | None = None
    # ALF's prev_action: the steps it learns from carry the action of the step before
    # (zeros where an episode starts); to act on it, an agent keeps it in its carry.
    uses_prev_action: bool = False
    # The multipliers a controller sets on its scheduled hyperparameters
    # (``learning.Hyperparameters``), read from and written into its state; {} where none.
    controls: ControlsFn = state_controls
    with_controls: WithControlsFn = with_state_controls
    # A model without a policy (act and policy None): how it is evaluated on held-out data.
    scoring: Scoring | None = None

    def __post_init__(self):
        if (self.act is None or self.policy is None) != (self.scoring is not None):
            raise ValueError(
                f"agent {self.name!r}: an agent acts and has a policy, or is a model without "
                "either that is evaluated by its scoring; not both, not neither"
            )


# name -> (config class, factory(spec, config, devices) -> Agent)
REGISTRY: dict[str, tuple[type, Callable[..., Agent]]] = {}
MASKS_ACTIONS: set[str] = set()  # the algorithms that act and learn on action masks


def register(
    name: str, config_class: type, factory: Callable[..., Agent], masks_actions: bool = False
) -> None:
    """Makes ``name`` an algorithm ``heron.agents.make`` and ``heron train NAME`` know:
    ``factory(spec, config, devices)`` builds its Agent from a ``config_class``.
    ``masks_actions``: it acts and learns on the legal actions of an environment that gives
    them (``EnvSpec.action_mask``); other agents refuse such environments."""
    REGISTRY[name] = (config_class, factory)
    if masks_actions:
        MASKS_ACTIONS.add(name)
    else:
        MASKS_ACTIONS.discard(name)


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The ``uniform`` replay of an off-policy agent."""

    capacity: int = integer(100_000, 1)
    """Steps kept per environment."""
    min_size: int = integer(2_000, 0)
    """Steps stored (across environments) before the first update."""
    ratio: float = number(0.25, 0.0, 1000.0, low_open=True)
    """Replay ratio: optimiser updates per collected environment step (at most 1000: more
    would keep the learner on one step's data for good)."""


def check_config(config, name: str) -> None:
    """Validates every declared field of an agent config under the agent's name."""
    validate(config, name)


def check_recurrence(config, name: str) -> None:
    """ALF's rules for recurrent agents trained on sequences (``use_rollout_state`` needs a
    core; a core trained on sequences of one step from zero states never uses its memory)."""
    recurrent = config.network.recurrent
    check(
        recurrent or not config.use_rollout_state,
        f"{name}.use_rollout_state needs a recurrent core ({name}.network.core lstm or gru): "
        "a feed-forward network has no state to record",
    )
    if recurrent and not config.use_rollout_state:
        check(
            config.sequence_length > 1,
            f"a recurrent {name} trained on sequences of length 1 never uses its memory: set "
            f"{name}.use_rollout_state True (train from the recorded state) or "
            f"{name}.sequence_length > 1",
        )


_WARNED: set[str] = set()


def warn_zero_start(config, name: str) -> None:
    if config.network.recurrent and not config.use_rollout_state:
        message = (
            f"heron: a recurrent {name} trains each sequence from a zero state; consider "
            f"{name}.use_rollout_state True to start from the state recorded when acting"
        )
        if message not in _WARNED:
            _WARNED.add(message)
            warnings.warn(message, stacklevel=3)


__all__ = [
    "MASKS_ACTIONS",
    "REGISTRY",
    "ROLLOUT_STATE",
    "Agent",
    "ConfigError",
    "MissingExtrasError",
    "ReplayConfig",
    "Scoring",
    "check_config",
    "check_recurrence",
    "extra",
    "register",
    "warn_zero_start",
]
