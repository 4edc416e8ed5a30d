"""Hyperparameter schedules: values that change with the optimiser-step counter.

A schedule maps the agent's optimiser-step count (an int32 scalar, possibly traced; ALF's
global counter, Trax's controller step), or for the hyperparameters an agent declares so
(DQN's epsilon) the environment steps collected, to a float32 value. Schedules are frozen, hashable
dataclasses, so they can sit in a frozen config and be static under ``jax.jit``; calling one
is pure ``jnp`` (jit- and vmap-safe, elementwise over an array of steps).

Forms, as written on the command line or in a config (``parse_schedule``):

- a number, ``0.01``, ``1e-3``, ``inf``: that value at every step (``constant(v)``);
- ``linear(init, end, steps)``: straight from init at step 0 to end at ``steps``, then end;
- ``cosine(init, end, steps)``: half a cosine from init to end over ``steps``, then end;
- ``piecewise(v0, step1, v1, step2, v2, ...)``: v0 before step1, v1 from step1 until step2...;
- ``exponential(init, rate, steps[, end])``: ``init * rate ** (step / steps)``, clipped
  so it stops at end once it gets there.

Steps and boundaries are integers (``5e5`` is accepted); negative steps count as step 0.
``str(schedule)`` gives back a string that parses to an equal schedule.

The values come from optax's schedules; heron adds the parsing, the validation,
``value_range`` and the few wrappers (noted where they are) that keep the semantics above
where optax's differ. A Schedule is itself a valid optax schedule (a function of the step).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import numbers
import re
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, TypeAlias

import jax
import jax.numpy as jnp
import optax

_MAX_STEP = 2**31 - 1  # the step counter is int32


class ScheduleError(ValueError):
    """A schedule string or parameters that do not make a valid schedule."""

    def __init__(self, text: str, reason: str):
        self.text, self.reason = text, reason
        super().__init__(f"bad schedule {text!r}: {reason}; accepted forms: {ACCEPTED_FORMS}")

    def __reduce__(self):
        return type(self), (self.text, self.reason)


class Schedule(abc.ABC):
    """A value as a function of the optimiser step; subclasses are frozen dataclasses."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def _optax(self) -> optax.Schedule:
        """The optax schedule that computes the values: int32 step(s) -> value(s)."""

    def __call__(self, step: jax.typing.ArrayLike) -> jax.Array:
        """The float32 value at ``step`` (elementwise over an array of steps)."""
        # Clipped to value_range, which configs validate: optax's ``(init - end) * frac +
        # end`` can round an ulp past init. Some optax schedules return a Python float.
        low, high = self.value_range()
        value = jnp.clip(jnp.asarray(self._optax()(step), jnp.float32), low, high)
        return jnp.broadcast_to(value, jnp.shape(step))

    @abc.abstractmethod
    def value_range(self) -> tuple[float, float]:
        """(min, max) of the values over all steps >= 0 (inf / sup where only approached)."""

    @abc.abstractmethod
    def _args(self) -> tuple[float | int, ...]:
        """The arguments of the string form, in order."""

    @property
    def is_constant(self) -> bool:
        low, high = self.value_range()
        return low == high

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(_format(a) for a in self._args())})"

    def _fail(self, reason: str) -> NoReturn:
        raise ScheduleError(str(self), reason)


@dataclasses.dataclass(frozen=True)
class Constant(Schedule):
    """``value`` at every step."""

    kind: ClassVar[str] = "constant"
    value: float

    def __post_init__(self):
        _set_float(self, "value", allow_infinite=True)

    def _optax(self):
        return optax.constant_schedule(self.value)

    def value_range(self):
        return self.value, self.value

    def _args(self):
        return (self.value,)

    def __str__(self) -> str:
        return _format(self.value)


@dataclasses.dataclass(frozen=True)
class _Annealing(Schedule):
    """From ``init`` at step 0 to ``end`` at step ``steps``, then ``end``."""

    init: float
    end: float
    steps: int

    def __post_init__(self):
        _set_float(self, "init")
        _set_float(self, "end")
        _set_steps(self, "steps")

    def value_range(self):
        return min(self.init, self.end), max(self.init, self.end)

    def _args(self):
        return self.init, self.end, self.steps


@dataclasses.dataclass(frozen=True)
class Linear(_Annealing):
    """From ``init`` at step 0 to ``end`` at step ``steps`` in a straight line, then ``end``."""

    kind: ClassVar[str] = "linear"

    def _optax(self):
        # optax clips the step to [0, steps]. Its 1 - step / steps runs as 1 - step * (1 /
        # steps) under jit, which can miss end by an ulp from ``steps`` on: end is exact there.
        linear = optax.linear_schedule(self.init, self.end, self.steps)
        return lambda step: jnp.where(step >= self.steps, self.end, linear(step))


@dataclasses.dataclass(frozen=True)
class Cosine(_Annealing):
    """``end + (init - end) * (1 + cos(pi * min(step, steps) / steps)) / 2``."""

    kind: ClassVar[str] = "cosine"

    def _optax(self):
        # optax decays init to alpha * init: shifting a decay of init - end to 0 by end also
        # covers init = 0. optax does not clip negative steps, where the cosine is symmetric.
        decay = optax.cosine_decay_schedule(self.init - self.end, self.steps)
        return lambda step: self.end + decay(jnp.maximum(step, 0))


@dataclasses.dataclass(frozen=True)
class Piecewise(Schedule):
    """``values[0]`` before ``boundaries[0]``, ``values[i]`` from ``boundaries[i - 1]`` on.

    Built from the string form's order by ``piecewise(v0, step1, v1, ...)``.
    """

    kind: ClassVar[str] = "piecewise"
    values: tuple[float, ...]
    boundaries: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(self.values))
        object.__setattr__(self, "boundaries", tuple(self.boundaries))
        if len(self.values) != len(self.boundaries) + 1:
            self._fail(
                f"needs one value more than boundaries, got {len(self.values)} values "
                f"and {len(self.boundaries)} boundaries"
            )
        values = tuple(_float(self, v, "value", allow_infinite=True) for v in self.values)
        boundaries = tuple(_step(self, b, "boundary", minimum=0) for b in self.boundaries)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "boundaries", boundaries)
        if any(b >= c for b, c in zip(self.boundaries, self.boundaries[1:], strict=False)):
            self._fail(f"boundaries must be strictly increasing, got {list(self.boundaries)}")

    def _optax(self):
        # Not optax.piecewise_constant_schedule: it multiplies v0 by scales, which cannot
        # leave 0, change sign (it refuses negative scales) or leave inf (inf * 0 is nan),
        # and it rounds. A negative step counts as step 0, so a boundary at 0 applies to it.
        joined = optax.join_schedules(
            [optax.constant_schedule(v) for v in self.values], self.boundaries
        )
        return lambda step: joined(jnp.maximum(step, 0))

    def value_range(self):
        reached = self.values[1:] if self.boundaries and self.boundaries[0] == 0 else self.values
        return min(reached), max(reached)

    def _args(self):
        pairs = (x for pair in zip(self.boundaries, self.values[1:], strict=False) for x in pair)
        return (*self.values[:1], *pairs)


@dataclasses.dataclass(frozen=True)
class Exponential(Schedule):
    """``init * rate ** (step / steps)``, stopped at ``end`` (if given) once it gets there.

    ``end`` must lie between ``init`` and where the decay heads: 0 when ``rate < 1``,
    +-inf (the sign of init) when ``rate > 1``. The factor ``rate ** (step / steps)`` is a
    float32: it saturates to inf or 0 beyond about 3e38 or 1e-38.
    """

    kind: ClassVar[str] = "exponential"
    init: float
    rate: float
    steps: int
    end: float | None = None

    def __post_init__(self):
        _set_float(self, "init")
        _set_float(self, "rate")
        _set_steps(self, "steps")
        if self.rate <= 0:
            self._fail(f"rate must be > 0, got {_format(self.rate)}")
        if self.end is not None:
            _set_float(self, "end")
            low, high = sorted((self.init, self._limit()))
            if not low <= self.end <= high:
                self._fail(
                    f"end {_format(self.end)} must lie between init {_format(self.init)} and "
                    f"{_format(self._limit())}, where rate {_format(self.rate)} heads"
                )

    def _limit(self) -> float:
        if self.init == 0 or self.rate == 1:
            return self.init
        return 0.0 if self.rate < 1 else math.copysign(math.inf, self.init)

    def _optax(self):
        low, high = self.value_range()
        if low == high:  # also init == 0, where 0 * (rate ** t overflowing to inf) is nan
            return optax.constant_schedule(low)
        # No end_value: optax clips with max (rate < 1) or min (rate > 1), right only for a
        # positive init; __call__'s clip to value_range stops at end for both signs.
        return optax.exponential_decay(self.init, self.steps, self.rate)  # steps <= 0: init

    def value_range(self):
        limit = self._limit() if self.end is None else self.end
        return min(self.init, limit), max(self.init, limit)

    def _args(self):
        head = (self.init, self.rate, self.steps)
        return head if self.end is None else (*head, self.end)


def constant(value: float) -> Constant:
    """``value`` at every step."""
    return Constant(value)


def linear(init: float, end: float, steps: int) -> Linear:
    """From init at step 0 to end at step ``steps``, then held at end."""
    return Linear(init, end, steps)


def cosine(init: float, end: float, steps: int) -> Cosine:
    """Cosine decay from init to end over ``steps``, then held at end."""
    return Cosine(init, end, steps)


def piecewise(v0: float, *steps_and_values: float) -> Piecewise:
    """``piecewise(v0, step1, v1, step2, v2, ...)``: v0 before step1, v1 from step1, ..."""
    if len(steps_and_values) % 2:
        args = ", ".join(_format(a) for a in (v0, *steps_and_values))
        raise ScheduleError(f"piecewise({args})", "a boundary step has no value after it")
    return Piecewise((v0, *steps_and_values[1::2]), tuple(steps_and_values[0::2]))


def exponential(init: float, rate: float, steps: int, end: float | None = None) -> Exponential:
    """``init * rate ** (step / steps)``, held at end (if given) once it gets there."""
    return Exponential(init, rate, steps, end)


ScheduleLike: TypeAlias = float | str | Schedule

_KINDS: dict[str, tuple[Callable[..., Schedule], str, Callable[[int], bool]]] = {
    "constant": (constant, "constant(v)", lambda n: n == 1),
    "linear": (linear, "linear(init, end, steps)", lambda n: n == 3),
    "cosine": (cosine, "cosine(init, end, steps)", lambda n: n == 3),
    "piecewise": (piecewise, "piecewise(v0, step1, v1, step2, v2, ...)", lambda n: n % 2 == 1),
    "exponential": (exponential, "exponential(init, rate, steps[, end])", lambda n: n in (3, 4)),
}
ACCEPTED_FORMS = "a number (0.01), " + ", ".join(form for _, form, _ in _KINDS.values())
_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\(([^()]*)\)\s*")


def parse_schedule(text: str) -> Schedule:
    """Parses a number or a call form (see the module docstring); raises ScheduleError."""
    call = _CALL.fullmatch(text)
    if call is None:
        try:
            return Constant(float(text))
        except ScheduleError as error:  # a ValueError too, so caught first
            raise ScheduleError(text, error.reason) from None
        except ValueError:
            raise ScheduleError(text, "neither a number nor a call like linear(1, 0, 10)") from None
    kind, args_text = call.groups()
    if kind not in _KINDS:
        raise ScheduleError(text, f"unknown kind {kind!r}")
    make, form, takes = _KINDS[kind]
    args = [a.strip() for a in args_text.split(",")] if args_text.strip() else []
    if not takes(len(args)):
        raise ScheduleError(text, f"expected {form}, got {len(args)} argument(s)")
    try:
        return make(*(_parse_number(text, a) for a in args))
    except ScheduleError as error:
        raise ScheduleError(text, error.reason) from None


def as_schedule(value: ScheduleLike) -> Schedule:
    """A Schedule from a number, a schedule string or a Schedule (returned as is)."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, str):
        return parse_schedule(value)
    if isinstance(value, numbers.Real):
        return Constant(value)
    raise TypeError(f"expected a number, a schedule string or a Schedule, got {value!r}")


def _parse_number(text: str, arg: str) -> int | float:
    try:
        return int(arg)  # exact for step counts
    except ValueError:
        pass
    try:
        return float(arg)
    except ValueError:
        raise ScheduleError(text, f"argument {arg!r} is not a number") from None


def _format(x: Any) -> str:
    return repr(x) if isinstance(x, float) else str(x)


def _float(schedule: Schedule, x: Any, name: str, allow_infinite: bool = False) -> float:
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        schedule._fail(f"{name} {x!r} is not a number")
    if math.isnan(value) or (math.isinf(value) and not allow_infinite):
        schedule._fail(f"{name} must {'not be nan' if allow_infinite else 'be finite'}, got {x!r}")
    return value


def _step(schedule: Schedule, x: Any, name: str, minimum: int) -> int:
    integral = isinstance(x, numbers.Integral) or (
        isinstance(x, numbers.Real) and float(x).is_integer()
    )
    if not integral or not minimum <= x <= _MAX_STEP:
        schedule._fail(f"{name} must be an integer in [{minimum}, 2**31 - 1], got {x!r}")
    return int(x)


def _set_float(schedule: Schedule, field: str, allow_infinite: bool = False) -> None:
    value = _float(schedule, getattr(schedule, field), field, allow_infinite)
    object.__setattr__(schedule, field, value)


def _set_steps(schedule: Schedule, field: str) -> None:
    object.__setattr__(schedule, field, _step(schedule, getattr(schedule, field), field, minimum=1))
