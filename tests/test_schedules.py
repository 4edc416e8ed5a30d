import dataclasses
import functools
import math
import operator
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.schedules import (
    ACCEPTED_FORMS,
    Constant,
    Cosine,
    Exponential,
    Linear,
    Piecewise,
    Schedule,
    ScheduleError,
    as_schedule,
    constant,
    cosine,
    exponential,
    linear,
    parse_schedule,
    piecewise,
)

MAX_STEP = 2**31 - 1
INF = math.inf


def reference(schedule: Schedule, step: int) -> float:
    """The schedule's value at ``step`` in plain Python floats."""
    t = max(step, 0)
    match schedule:
        case Constant(value):
            return value
        case Linear(init, end, steps):
            return init + (end - init) * min(t, steps) / steps
        case Cosine(init, end, steps):
            return end + (init - end) * 0.5 * (1 + math.cos(math.pi * min(t, steps) / steps))
        case Piecewise(values, boundaries):
            return values[sum(t >= b for b in boundaries)]
        case Exponential(init, rate, steps, end):
            try:
                value = init * rate ** (t / steps)
            except OverflowError:
                value = 0.0 if init == 0 else math.copysign(INF, init)
            if end is not None:
                value = min(max(value, min(init, end)), max(init, end))
            return value
    raise AssertionError(schedule)


def tolerance(schedule: Schedule) -> float:
    """Float32 rounding allowance, relative to the largest finite value the schedule takes."""
    scale = max((abs(b) for b in schedule.value_range() if math.isfinite(b)), default=0.0)
    return 1e-5 * scale + 1e-30


def saturate(x) -> np.ndarray:
    """Values past 1e30 count as +-inf: float32 (or its factor rate ** t) overflows near there."""
    x = np.asarray(x, np.float64)
    return np.where(np.abs(x) > 1e30, np.copysign(INF, x), x)


def assert_close(actual, expected, tol: float):
    actual, expected = saturate(actual), saturate(expected)
    assert not np.isnan(actual).any()
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite], expected[~finite])
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-4, atol=tol)


# ----------------------------------------------------------------- each kind at chosen steps

CASES = [
    ("0.25", [0, 1, 5, 1000, MAX_STEP]),
    ("linear(0.01, 0.0, 1000)", [0, 1, 250, 500, 999, 1000, 1001, 10**6, MAX_STEP]),
    ("linear(-1, 3, 7)", [0, 1, 3, 6, 7, 8, 70]),
    ("cosine(3e-4, 0, 500)", [0, 1, 125, 250, 375, 499, 500, 501, 10**6, MAX_STEP]),
    ("cosine(0.1, 0.9, 10)", [0, 2, 5, 8, 10, 11, 100]),
    ("cosine(0, 2, 8)", [0, 1, 4, 7, 8, 9, MAX_STEP]),  # optax's alpha * init cannot start at 0
    ("piecewise(1e-3, 10, 3e-4, 50, 1e-4)", [0, 9, 10, 11, 30, 49, 50, 51, 10**6, MAX_STEP]),
    ("piecewise(7, 0, 8)", [0, 1, 100]),
    ("piecewise(0, 5, -1, 10, inf)", [0, 4, 5, 9, 10, MAX_STEP]),  # no optax scale gets there
    ("exponential(1.0, 0.5, 100)", [0, 1, 50, 100, 150, 200, 1000, 10**5, MAX_STEP]),
    ("exponential(1.0, 0.5, 100, 0.2)", [0, 50, 100, 200, 232, 233, 300, MAX_STEP]),
    ("exponential(2.0, 3.0, 10, 50)", [0, 5, 10, 20, 29, 30, 31, 100]),
    ("exponential(-2.0, 3.0, 10)", [0, 5, 10, 20, 100]),
    ("exponential(-2.0, 0.5, 10, -0.5)", [0, 5, 10, 19, 20, 21, 100]),  # end above a negative init
]


@pytest.mark.parametrize("text, steps", CASES, ids=[text for text, _ in CASES])
def test_values_at_chosen_steps_match_formula_eager_jit_and_vmap(text, steps):
    schedule = parse_schedule(text)
    expected = [reference(schedule, t) for t in steps]
    tol = tolerance(schedule)

    eager = [schedule(jnp.int32(t)) for t in steps]
    assert all(v.dtype == jnp.float32 and v.shape == () for v in eager)
    assert_close(eager, expected, tol)

    traced = jax.jit(lambda t: schedule(t))
    assert_close([traced(jnp.int32(t)) for t in steps], expected, tol)

    as_static = jax.jit(lambda s, t: s(t), static_argnums=0)
    assert_close([as_static(schedule, jnp.int32(t)) for t in steps], expected, tol)

    batched = jax.jit(jax.vmap(schedule))(jnp.asarray(steps, jnp.int32))
    assert batched.dtype == jnp.float32 and batched.shape == (len(steps),)
    assert_close(batched, expected, tol)
    assert_close(schedule(jnp.asarray(steps, jnp.int32)), expected, tol)


def test_known_values():
    assert float(linear(1.0, 0.0, 10)(jnp.int32(4))) == pytest.approx(0.6)
    assert float(cosine(1.0, 0.0, 10)(jnp.int32(5))) == pytest.approx(0.5)
    assert float(exponential(8.0, 0.5, 10)(jnp.int32(30))) == pytest.approx(1.0)
    assert float(exponential(8.0, 0.5, 10, 2.0)(jnp.int32(30))) == 2.0
    assert float(piecewise(1, 10, 2)(jnp.int32(10))) == 2.0


def test_negative_steps_count_as_step_zero():
    for schedule in [linear(1, 0, 10), cosine(1, 0, 10), exponential(1, 2, 10), piecewise(1, 0, 2)]:
        assert float(schedule(jnp.int32(-5))) == float(schedule(jnp.int32(0)))


@pytest.mark.parametrize("steps", [41, 47, 55, 1164])
def test_linear_is_exactly_end_from_steps_on_under_jit(steps):
    """Under jit XLA computes step / steps as step * (1 / steps), which for these steps is
    not 1 at step == steps; the schedule still ends exactly at end, as documented."""
    for init, end in [(1.0, 0.0), (-3.0, 0.25), (0.01, 1e-4)]:
        traced = jax.jit(linear(init, end, steps).__call__)
        for t in [steps, steps + 1, MAX_STEP]:
            assert float(traced(jnp.int32(t))) == np.float32(end)


def test_exponential_from_zero_stays_zero_where_growth_overflows():
    assert float(exponential(0.0, 2.0, 10)(jnp.int32(MAX_STEP))) == 0.0


# ------------------------------------------------------------------- value_range, is_constant


@pytest.mark.parametrize(
    "schedule, expected_range, is_constant",
    [
        (constant(0.5), (0.5, 0.5), True),
        (constant(INF), (INF, INF), True),
        (linear(0.01, 0.0, 100), (0.0, 0.01), False),
        (linear(-1, 3, 7), (-1.0, 3.0), False),
        (linear(2, 2, 7), (2.0, 2.0), True),
        (cosine(0.1, 0.9, 10), (0.1, 0.9), False),
        (piecewise(1e-3, 10, 3e-4, 50, 1e-4), (1e-4, 1e-3), False),
        (piecewise(5, 0, 1, 10, 2), (1.0, 2.0), False),  # v0 is never used: step 0 is past 0
        (piecewise(5, 0, 1), (1.0, 1.0), True),
        (piecewise(0.5), (0.5, 0.5), True),
        (piecewise(-INF, 10, 1), (-INF, 1.0), False),
        (exponential(1.0, 0.5, 100), (0.0, 1.0), False),
        (exponential(-2.0, 0.5, 100), (-2.0, 0.0), False),
        (exponential(1.0, 0.5, 100, 0.2), (0.2, 1.0), False),
        (exponential(2.0, 3.0, 10), (2.0, INF), False),
        (exponential(-2.0, 3.0, 10), (-INF, -2.0), False),
        (exponential(2.0, 3.0, 10, 50), (2.0, 50.0), False),
        (exponential(2.0, 1.0, 10), (2.0, 2.0), True),
        (exponential(0.0, 3.0, 10), (0.0, 0.0), True),
    ],
    ids=str,
)
def test_value_range_and_is_constant(schedule, expected_range, is_constant):
    assert schedule.value_range() == expected_range
    assert schedule.is_constant is is_constant


# ---------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.01", constant(0.01)),
        ("1e-3", constant(0.001)),
        (" 2 ", constant(2.0)),
        ("-0.5", constant(-0.5)),
        ("inf", constant(INF)),
        ("-inf", constant(-INF)),
        ("constant(0.3)", constant(0.3)),
        ("linear(0.01, 0.0, 1000000)", linear(0.01, 0.0, 1_000_000)),
        ("  linear ( 0.01 ,0,\t1000000 ) ", linear(0.01, 0.0, 1_000_000)),
        ("cosine(3e-4,0,5e5)", cosine(3e-4, 0.0, 500_000)),
        ("piecewise(1e-3, 10000, 3e-4, 50000, 1e-4)", piecewise(1e-3, 10_000, 3e-4, 50_000, 1e-4)),
        ("exponential(1.0, 0.5, 1000)", exponential(1.0, 0.5, 1000)),
        ("exponential(1.0, 0.5, 1000, 0.01)", exponential(1.0, 0.5, 1000, 0.01)),
    ],
)
def test_parses_numbers_and_call_forms(text, expected):
    parsed = parse_schedule(text)
    assert parsed == expected
    assert type(parsed) is type(expected)


def test_inf_is_a_constant_infinity():
    schedule = parse_schedule("inf")
    assert schedule == Constant(INF) and schedule.is_constant
    assert float(schedule(jnp.int32(123))) == INF
    assert str(schedule) == "inf"


def test_str_is_the_canonical_call_form():
    assert str(constant(0.01)) == "0.01"
    assert str(linear(0.01, 0, 1_000_000)) == "linear(0.01, 0.0, 1000000)"
    assert str(cosine(3e-4, 0, 5e5)) == "cosine(0.0003, 0.0, 500000)"
    assert str(piecewise(1e-3, 10, 3e-4, 50, 1e-4)) == "piecewise(0.001, 10, 0.0003, 50, 0.0001)"
    assert str(exponential(1, 0.5, 1000)) == "exponential(1.0, 0.5, 1000)"
    assert str(exponential(1, 0.5, 1000, 0.1)) == "exponential(1.0, 0.5, 1000, 0.1)"


BAD_STRINGS = [
    "linaer(1, 0, 10)",
    "",
    "   ",
    "abc",
    "1.0.0",
    "nan",
    "linear(1, 0)",
    "linear(1, 0, 10, 5)",
    "linear(1, zero, 10)",
    "linear(1,,10)",
    "linear(1, 0, 10",
    "linear((1), 0, 10)",
    "linear(1, 0, 0)",
    "linear(1, 0, 10.5)",
    "linear(1, 0, 1e10)",
    "linear(nan, 0, 10)",
    "linear(inf, 0, 10)",
    "cosine(1, 0, -5)",
    "constant()",
    "constant(1, 2)",
    "piecewise()",
    "piecewise(1, 10)",
    "piecewise(1, 10, 2, 10, 3)",
    "piecewise(1, 20, 2, 10, 3)",
    "piecewise(1, -1, 2)",
    "piecewise(1, 2.5, 2)",
    "piecewise(nan, 10, 2)",
    "exponential(1, 0, 10)",
    "exponential(1, -0.5, 10)",
    "exponential(1, 0.5)",
    "exponential(1, 0.5, 10, 2)",
    "exponential(1, 0.5, 10, -0.1)",
    "exponential(1, 2, 10, 0.5)",
    "exponential(1, 1, 10, 0.5)",
]


@pytest.mark.parametrize("text", BAD_STRINGS)
def test_malformed_strings_are_refused_naming_the_text_and_all_forms(text):
    with pytest.raises(ScheduleError) as info:
        parse_schedule(text)
    message = str(info.value)
    assert repr(text) in message
    assert "accepted forms" in message
    assert message.endswith(ACCEPTED_FORMS)
    for form in ["a number (0.01)", "constant(v)", "linear(init, end, steps)"]:
        assert form in message
    assert "exponential(init, rate, steps[, end])" in message
    assert "piecewise(v0, step1, v1, step2, v2, ...)" in message
    assert isinstance(info.value, ValueError)


def test_unknown_kind_message():
    with pytest.raises(ScheduleError) as info:
        parse_schedule("linaer(1, 0, 10)")
    assert str(info.value) == (
        "bad schedule 'linaer(1, 0, 10)': unknown kind 'linaer'; accepted forms: a number "
        "(0.01), constant(v), linear(init, end, steps), cosine(init, end, steps), "
        "piecewise(v0, step1, v1, step2, v2, ...), exponential(init, rate, steps[, end])"
    )


@pytest.mark.parametrize(
    "text, reason",
    [
        ("linear(1, 0)", "expected linear(init, end, steps), got 2 argument(s)"),
        ("linear(1, zero, 10)", "argument 'zero' is not a number"),
        ("linear(1, 0, 0)", "steps must be an integer in [1, 2**31 - 1], got 0"),
        ("piecewise(1, 20, 2, 10, 3)", "boundaries must be strictly increasing, got [20, 10]"),
        ("exponential(1, -0.5, 10)", "rate must be > 0, got -0.5"),
        ("exponential(1, 2, 10, 0.5)", "end 0.5 must lie between init 1.0 and inf"),
    ],
)
def test_refusals_say_why(text, reason):
    with pytest.raises(ScheduleError, match=r"^bad schedule ") as info:
        parse_schedule(text)
    assert info.value.text == text
    assert reason in info.value.reason


def test_direct_construction_is_validated_too():
    with pytest.raises(ScheduleError, match=r"'linear\(1.0, 0.0, 0\)': steps must be"):
        linear(1, 0, 0)
    with pytest.raises(ScheduleError, match="no value after it"):
        piecewise(1, 10)
    with pytest.raises(ScheduleError, match="one value more than boundaries"):
        Piecewise((1.0, 2.0), ())
    with pytest.raises(ScheduleError, match="must not be nan"):
        constant(math.nan)


def test_schedule_error_pickles():
    error = pickle.loads(pickle.dumps(ScheduleError("x(1)", "why")))
    assert (error.text, error.reason) == ("x(1)", "why")


# ------------------------------------------------------------------------------ as_schedule


def test_as_schedule():
    assert as_schedule(0.5) == constant(0.5)
    assert as_schedule(3) == constant(3.0)
    assert as_schedule(np.float32(0.25)) == constant(0.25)
    assert as_schedule("linear(1, 0, 10)") == linear(1.0, 0.0, 10)
    schedule = cosine(1, 0, 10)
    assert as_schedule(schedule) is schedule
    with pytest.raises(TypeError, match="expected a number"):
        as_schedule(None)
    with pytest.raises(ScheduleError):
        as_schedule("linear(1)")


def test_lives_in_a_frozen_config_static_under_jit():
    @dataclasses.dataclass(frozen=True)
    class Config:
        learning_rate: float | str | Schedule = "linear(1.0, 0.0, 10)"
        gamma: float | str | Schedule = 0.99

    given_config = Config()
    config = Config(as_schedule(given_config.learning_rate), as_schedule(given_config.gamma))
    low, high = config.gamma.value_range()
    assert 0.0 <= low <= high <= 1.0

    traces = []

    @functools.partial(jax.jit, static_argnums=0)
    def update(config: Config, step):
        traces.append(config)
        return config.learning_rate(step) * config.gamma(step)

    assert float(update(config, jnp.int32(5))) == pytest.approx(0.5 * 0.99)
    same = Config(parse_schedule("linear(1, 0, 10)"), parse_schedule("0.99"))
    assert same == config and hash(same) == hash(config)
    assert float(update(same, jnp.int32(2))) == pytest.approx(0.8 * 0.99)
    assert len(traces) == 1  # equal configs share one compiled update


# ------------------------------------------------------------------------------- properties

magnitude = st.floats(2.0**-20, 2.0**20, width=32)  # keeps rate ** t's float32 limits far away
finite = st.one_of(st.just(0.0), magnitude, magnitude.map(operator.neg))
value = st.one_of(finite, st.sampled_from([INF, -INF]))
steps = st.integers(1, 10**6)


@st.composite
def piecewise_schedules(draw):
    boundaries = sorted(draw(st.sets(st.integers(0, 10**6), max_size=4)))
    values = draw(st.lists(value, min_size=len(boundaries) + 1, max_size=len(boundaries) + 1))
    pairs = [x for pair in zip(boundaries, values[1:], strict=True) for x in pair]
    return piecewise(values[0], *pairs)


@st.composite
def exponential_schedules(draw):
    init = draw(finite)
    rate = draw(
        st.one_of(
            st.floats(0.0625, 0.9375, width=32),
            st.floats(1.0625, 16.0, width=32),
            st.just(1.0),
        )
    )
    end = None
    if draw(st.booleans()):
        if rate < 1:
            end = init * draw(st.floats(0.0, 1.0))
        elif rate > 1:
            end = init * draw(st.floats(1.0, 1e3))
        else:
            end = init
    return exponential(init, rate, draw(st.integers(1, 10_000)), end)


schedules = st.one_of(
    st.builds(constant, value),
    st.builds(linear, finite, finite, steps),
    st.builds(cosine, finite, finite, steps),
    piecewise_schedules(),
    exponential_schedules(),
)


def landmarks(schedule: Schedule) -> list[int]:
    """Steps where the schedule changes course, and the largest step."""
    marks = [0, 1, MAX_STEP]
    match schedule:
        case Linear(steps=n) | Cosine(steps=n) | Exponential(steps=n):
            marks += [n // 2, n - 1, n, n + 1]
        case Piecewise(boundaries=boundaries):
            marks += [x for b in boundaries for x in (b - 1, b, b + 1)]
    return marks


@given(schedules)
@settings(max_examples=150, deadline=None)
def test_str_round_trips(schedule):
    parsed = parse_schedule(str(schedule))
    assert parsed == schedule
    assert type(parsed) is type(schedule)
    assert hash(parsed) == hash(schedule)


@given(schedules, st.lists(st.integers(-(2**31), MAX_STEP), min_size=24, max_size=24))
@settings(max_examples=100, deadline=None)
def test_jitted_values_lie_in_the_float32_value_range_without_tolerance(schedule, random_steps):
    """What configs validate (value_range) holds for every value even where float32 rounds
    an annealing an ulp past its init."""
    sampled = (landmarks(schedule) + random_steps + [0] * 40)[:40]
    values = jax.jit(jax.vmap(schedule))(jnp.asarray(sampled, jnp.int32))
    low, high = schedule.value_range()
    assert np.all(values >= np.float32(low)) and np.all(values <= np.float32(high))


@given(schedules, st.lists(st.integers(0, MAX_STEP), min_size=16, max_size=16))
@settings(max_examples=150, deadline=None)
def test_value_range_bounds_values_and_is_attained(schedule, random_steps):
    sampled = (landmarks(schedule) + random_steps + [0] * 40)[:40]  # one shape: no recompiles
    values = np.asarray(schedule(jnp.asarray(sampled, jnp.int32)), np.float64)
    low, high = schedule.value_range()
    tol = tolerance(schedule)

    assert low <= high
    assert_close(values, [reference(schedule, t) for t in sampled], tol)
    assert np.all(values >= low - tol) and np.all(values <= high + tol)
    for bound in (low, high):
        attained = values == bound if math.isinf(bound) else np.abs(values - bound) <= tol
        assert attained.any(), (bound, values)
