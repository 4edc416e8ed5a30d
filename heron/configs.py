"""Validated configuration dataclasses: each field declares its allowed values once.

    @dataclasses.dataclass(frozen=True)
    class FooConfig:
        learning_rate: float | str = scheduled(3e-4, low=0.0, low_open=True)
        \"\"\"Adam step size (a number or a schedule).\"\"\"
        hidden_sizes: tuple[int, ...] = sizes((64, 64))
        core: str = choice("none", ("none", "lstm", "gru"))

        def __post_init__(self):
            validate(self, "foo")        # every field, sub-configs included, by full name

A bad value raises ``ConfigError`` naming the field by its full name (``ppo.network.core``),
the allowed values and the value given. Sub-configs (dataclass-valued fields) are checked
as part of their parent, under the parent's prefix.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from heron.schedules import ScheduleError, as_schedule


class ConfigError(ValueError):
    """A configuration value out of its allowed range."""


def check(condition: bool, message: str) -> None:
    """Raises ConfigError(message) unless ``condition``: for rules that join several fields."""
    if not condition:
        raise ConfigError(message)


@dataclasses.dataclass(frozen=True)
class Range:
    """Numbers in [low, high] (open ends where asked); ``inf`` allowed only as an end."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def describe(self) -> str:
        if math.isinf(self.high) and math.isinf(self.low):
            return "(any value)"
        if math.isinf(self.high):
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if math.isinf(self.low):
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return (
            f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
            f"{')' if self.high_open else ']'}"
        )

    def contains(self, smallest: float, largest: float) -> bool:
        above = smallest > self.low if self.low_open else smallest >= self.low
        below = largest < self.high if self.high_open else largest <= self.high
        return bool(above and below)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_range(limits: Range, integer: bool, optional: bool, allow_inf: bool = False) -> Callable:
    def check_value(name: str, value) -> None:
        if value is None and optional:
            return
        kind = "an integer" if integer else "a number"
        if not _number(value) or (integer and not float(value).is_integer()) or math.isnan(value):
            raise ConfigError(f"{name} must be {kind} {limits.describe()}, got {value!r}")
        if math.isinf(value) and not allow_inf:
            where = "" if limits.describe() == "(any value)" else f" {limits.describe()}"
            raise ConfigError(f"{name} must be a finite number{where}, got {value!r}")
        if not limits.contains(value, value):
            raise ConfigError(f"{name} must be {limits.describe()}, got {value!r}")

    return check_value


def _check_schedule(limits: Range) -> Callable:
    def check_value(name: str, value) -> None:
        try:
            schedule = as_schedule(value)
        except ScheduleError as error:
            raise ConfigError(f"{name}: {error}") from error
        smallest, largest = schedule.value_range()
        if not (math.isfinite(smallest) and math.isfinite(largest)):
            raise ConfigError(f"{name} must be finite {limits.describe()}, got {value}")
        if not limits.contains(smallest, largest):
            got = (
                value
                if schedule.is_constant
                else f"{value} (values from {smallest:g} to {largest:g})"
            )
            raise ConfigError(f"{name} must be {limits.describe()}, got {got}")

    return check_value


def _check_choice(choices: Sequence) -> Callable:
    def check_value(name: str, value) -> None:
        if value not in choices:
            raise ConfigError(
                f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}"
            )

    return check_value


def _check_sizes(allow_empty: bool) -> Callable:
    def check_value(name: str, value) -> None:
        ok = isinstance(value, tuple | list) and (allow_empty or len(value) > 0)
        if not ok or not all(_number(v) and float(v).is_integer() and v >= 1 for v in value):
            need = "zero or more" if allow_empty else "one or more"
            raise ConfigError(f"{name} must be {need} layer sizes >= 1, got {value!r}")

    return check_value


def _field(default, check_value: Callable):
    return dataclasses.field(default=default, metadata={"check": check_value})


def number(
    default,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    inf_is_off: bool = False,
):
    """A float field in the range (``optional``: None is allowed too). Infinite values are
    refused unless ``inf`` means "off" there (``inf_is_off``, or an infinite default)."""
    allow_inf = inf_is_off or (isinstance(default, float) and math.isinf(default))
    limits = Range(low, high, low_open, high_open)
    return _field(default, _check_range(limits, False, optional, allow_inf))


def integer(default, low: float = -math.inf, high: float = math.inf, *, optional: bool = False):
    """An int field in [low, high] (``optional``: None is allowed too)."""
    return _field(default, _check_range(Range(low, high), True, optional))


def scheduled(default, low: float = -math.inf, high: float = math.inf, *, low_open: bool = False):
    """A float-or-schedule field (see ``heron.schedules``) whose every value is in range."""
    return _field(default, _check_schedule(Range(low, high, low_open)))


def choice(default, choices: Sequence):
    """A field taking one of ``choices``."""
    return _field(default, _check_choice(tuple(choices)))


def registered(default, names: Callable[[], Sequence]):
    """A field taking one of the names ``names()`` gives when a config is made (built-ins
    and those registered so far)."""

    def check_value(name: str, value) -> None:
        _check_choice(tuple(names()))(name, value)

    return _field(default, check_value)


def sizes(default, allow_empty: bool = False):
    """A tuple of layer sizes >= 1."""
    return _field(tuple(default), _check_sizes(allow_empty))


def validate(config: Any, prefix: str) -> None:
    """Checks every declared field of ``config`` and of its sub-configs, naming each by its
    full name (``prefix.field``)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        name = f"{prefix}.{field.name}" if prefix else field.name
        if "check" in field.metadata:
            field.metadata["check"](name, value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            validate(value, name)


def unknown_fields(config_type, values: dict, prefix: str = "") -> list[str]:
    """The names in ``values`` (nested dicts for sub-configs) that ``config_type`` has no
    field for, dotted."""
    hints = typing.get_type_hints(config_type)
    unknown = []
    for name, value in values.items():
        if name not in hints:
            unknown.append(prefix + name)
        elif dataclasses.is_dataclass(hints[name]) and isinstance(value, dict):
            unknown += unknown_fields(hints[name], value, f"{prefix}{name}.")
    return unknown


def from_values(config_type, values: dict, base=None):
    """A ``config_type`` from JSON/TOML ``values`` (config.json's records, presets): nested
    dicts rebuild sub-configs, lists become tuples; fields not given keep ``base``'s values
    (default: the field defaults). Refuse ``unknown_fields`` first."""
    hints = typing.get_type_hints(config_type)
    kwargs = (
        {} if base is None else {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    )
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_values(hint, value, None if base is None else getattr(base, name))
        elif isinstance(value, list) and (
            typing.get_origin(hint) is tuple or isinstance(hint, types.UnionType)
        ):
            value = tuple(value)
        kwargs[name] = value
    return config_type(**kwargs)
