import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces as gymnax_spaces
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from heron import serialization as ser
from heron.specs import ActionSpec, EnvSpec, SpaceError, action_spec_from_space

F32_EPS = float(np.finfo(np.float32).eps)


# ----------------------------------------------------------------------------- references


def reference_box_bin(tokens, vocab_size, precision, low, high):
    """Plain loop: the [lower, upper) edges of the bin each element's digits name (float64)."""
    tokens = np.asarray(tokens).reshape(-1, precision)
    lower = np.zeros(len(tokens))
    for element, digits in enumerate(tokens):
        fraction = 0.0
        for i, digit in enumerate(digits):
            fraction += int(digit) * float(vocab_size) ** -(i + 1)
        lower[element] = fraction
    width = np.asarray(high, np.float64) - np.asarray(low, np.float64)
    bin_width = float(vocab_size) ** -precision
    return low + lower * width, low + (lower + bin_width) * width


def float_tolerance(low, high, precision):
    """float32 rounding of the affine maps and of each digit's extraction."""
    magnitude = np.maximum(np.abs(low), np.abs(high)) + (np.asarray(high) - np.asarray(low))
    return (precision + 4) * F32_EPS * magnitude


@st.composite
def boxes(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    size = int(np.prod(shape))
    low = draw(hnp.arrays(np.float64, size, elements=st.floats(-1e3, 1e3)))
    width = draw(hnp.arrays(np.float64, size, elements=st.floats(1e-2, 1e3)))
    clip = draw(st.sampled_from([ser.DEFAULT_CLIP_RANGE, (-1e4, 1e4), (-5.0, 7.5)]))
    assume(np.all(np.maximum(low, clip[0]) < np.minimum(low + width, clip[1])))
    serialization = ser.box_serialization(
        shape,
        vocab_size=draw(st.integers(2, 512)),
        precision=draw(st.integers(1, 4)),
        low=low.reshape(shape),
        high=(low + width).reshape(shape),
        clip_range=clip,
    )
    return serialization


@st.composite
def boxes_and_values(draw):
    serialization = draw(boxes())
    low, high = serialization.bounds
    batch = draw(st.integers(1, 3))
    span = np.broadcast_to(high - low, (batch,) + serialization.shape)
    # Values reach a whole range width past each bound, so clipping is exercised too.
    unit = draw(
        hnp.arrays(np.float64, (batch,) + serialization.shape, elements=st.floats(-1.0, 2.0))
    )
    values = (low + unit * span).astype(np.float32)
    return serialization, values


# ----------------------------------------------------------------------------- Box


@settings(max_examples=120, deadline=None)
@given(boxes_and_values())
def test_box_round_trip_is_within_half_a_quantisation_step(case):
    serialization, values = case
    low, high = serialization.bounds
    tokens = np.asarray(ser.serialize(serialization, values))
    assert tokens.dtype == np.int32
    assert tokens.shape == (len(values), serialization.size * serialization.precision)
    assert np.all((tokens >= 0) & (tokens < serialization.vocab_size))

    clipped = np.clip(values.astype(np.float64), low, high)
    tolerance = float_tolerance(low, high, serialization.precision)
    restored = np.asarray(ser.deserialize(serialization, tokens))
    assert restored.dtype == np.float32 and restored.shape == values.shape
    step = serialization.quantisation_step
    assert np.all(np.abs(restored - clipped) <= step / 2 + tolerance)

    # The digits name the bin that holds the clipped value, and come back as its centre
    # (plain-loop decoding in float64).
    flat_low, flat_high = low.reshape(-1), high.reshape(-1)
    flat_tolerance = tolerance.reshape(-1)
    for row, value, back in zip(tokens, clipped, restored, strict=True):
        lower, upper = reference_box_bin(
            row, serialization.vocab_size, serialization.precision, flat_low, flat_high
        )
        assert np.all(lower - flat_tolerance <= value.reshape(-1))
        assert np.all(value.reshape(-1) <= upper + flat_tolerance)
        assert np.all(np.abs(back.reshape(-1) - (lower + upper) / 2) <= flat_tolerance)


@settings(max_examples=80, deadline=None)
@given(boxes(), st.data())
def test_box_tokens_to_values_to_tokens_is_exact(serialization, data):
    low, high = serialization.bounds
    bins = float(serialization.vocab_size) ** serialization.precision
    # Exact while a bin is much wider than float32 resolution at the bounds' magnitude.
    assume(np.all(np.maximum(np.abs(low), np.abs(high)) / (high - low) * bins * F32_EPS < 0.05))
    tokens = data.draw(
        hnp.arrays(
            np.int32,
            (2, serialization.n_tokens),
            elements=st.integers(0, serialization.vocab_size - 1),
        )
    )
    values = ser.deserialize(serialization, tokens)
    np.testing.assert_array_equal(ser.serialize(serialization, values), tokens)


def test_box_digits_by_hand():
    serialization = ser.box_serialization((2,), vocab_size=10, precision=2, low=0.0, high=1.0)
    tokens = ser.serialize(serialization, np.array([[0.372, 1.0], [-3.0, 0.999]], np.float32))
    # 0.372 -> 3, 7; high -> top bin 9, 9; below low -> 0, 0.
    np.testing.assert_array_equal(tokens, [[3, 7, 9, 9], [0, 0, 9, 9]])
    np.testing.assert_allclose(
        ser.deserialize(serialization, tokens), [[0.375, 0.995], [0.005, 0.995]], rtol=1e-6
    )
    assert serialization.quantisation_step.tolist() == pytest.approx([0.01, 0.01])


def test_box_bounds_are_clipped_to_the_clip_range():
    space = gymnasium.spaces.Box(
        np.array([-np.inf, -1.0, -500.0], np.float32),
        np.array([np.inf, 2.0, 3.0], np.float32),
        dtype=np.float32,
    )
    serialization = ser.space_serialization(space, vocab_size=16, clip_range=(-100.0, 100.0))
    assert serialization.low == (-100.0, -1.0, -100.0)
    assert serialization.high == (100.0, 2.0, 3.0)
    assert serialization.n_tokens == 3 * ser.DEFAULT_PRECISION


@pytest.mark.parametrize(
    "space",
    [
        gymnasium.spaces.Box(-1.0, 1.0, (2, 3)),
        gymnasium.spaces.Box(0.0, 5.0, ()),
        gymnax_spaces.Box(-2.0, 2.0, (4,), np.float32),
    ],
)
def test_box_space_serializations_round_trip(space):
    serialization = ser.space_serialization(space, vocab_size=32, precision=3)
    assert serialization.shape == tuple(space.shape)
    low, high = serialization.bounds
    values = np.stack([np.full(space.shape, 0.3), np.full(space.shape, -0.7)]).astype(np.float32)
    restored = ser.deserialize(serialization, ser.serialize(serialization, values))
    tolerance = float_tolerance(low, high, 3)
    error = np.abs(np.asarray(restored) - np.clip(values, low, high))
    assert np.all(error <= serialization.quantisation_step / 2 + tolerance)


def test_env_spec_observations_are_a_box_over_the_clip_range():
    spec = EnvSpec((3,), np.float32, ActionSpec(kind="discrete", n_actions=2))
    serialization = ser.observation_serialization(spec, vocab_size=8, clip_range=(-4.0, 4.0))
    assert serialization.kind == "box"
    assert serialization.low == (-4.0,) * 3 and serialization.high == (4.0,) * 3


# ----------------------------------------------------------------------------- discrete kinds


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    extra_vocab=st.integers(0, 30),
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    data=st.data(),
    make_space=st.sampled_from([gymnasium.spaces.Discrete, gymnax_spaces.Discrete]),
)
def test_discrete_round_trip_is_exact(n, extra_vocab, batch, data, make_space):
    vocab_size = max(n + extra_vocab, 2)
    for serialization in (
        ser.space_serialization(make_space(n), vocab_size),
        ser.action_serialization(make_space(n), vocab_size),
        ser.action_serialization(ActionSpec(kind="discrete", n_actions=n), vocab_size),
    ):
        assert (serialization.kind, serialization.n_tokens, serialization.shape) == (
            "discrete",
            1,
            (),
        )
        values = data.draw(hnp.arrays(np.int64, tuple(batch), elements=st.integers(0, n - 1)))
        tokens = ser.serialize(serialization, values)
        assert tokens.dtype == jnp.int32 and tokens.shape == tuple(batch) + (1,)
        np.testing.assert_array_equal(tokens[..., 0], values)
        restored = ser.deserialize(serialization, tokens)
        assert restored.dtype == jnp.int32
        np.testing.assert_array_equal(restored, values)


@settings(max_examples=60, deadline=None)
@given(
    n_controls=st.integers(1, 5),
    n_actions=st.integers(1, 12),
    extra_vocab=st.integers(0, 5),
    batch=st.integers(1, 4),
    data=st.data(),
)
def test_equal_multi_discrete_is_one_token_per_control(
    n_controls, n_actions, extra_vocab, batch, data
):
    vocab_size = max(n_actions + extra_vocab, 2)
    space = gymnasium.spaces.MultiDiscrete([n_actions] * n_controls)
    for serialization in (
        ser.action_serialization(space, vocab_size),
        ser.action_serialization(action_spec_from_space(space), vocab_size),
        ser.space_serialization(space, vocab_size),
    ):
        assert serialization.kind == "multi_discrete"
        assert serialization.n_tokens == n_controls
        np.testing.assert_array_equal(serialization.token_limits, [n_actions] * n_controls)
        values = data.draw(
            hnp.arrays(np.int32, (batch, n_controls), elements=st.integers(0, n_actions - 1))
        )
        tokens = ser.serialize(serialization, values)
        np.testing.assert_array_equal(tokens, values)
        np.testing.assert_array_equal(ser.deserialize(serialization, tokens), values)


def test_unequal_multi_discrete_observations_round_trip_as_trax():
    serialization = ser.space_serialization(gymnasium.spaces.MultiDiscrete([2, 5, 3]), 5)
    values = np.array([[1, 4, 2], [0, 0, 0]])
    np.testing.assert_array_equal(
        ser.deserialize(serialization, ser.serialize(serialization, values)), values
    )


def test_serialize_and_deserialize_work_under_jit_and_vmap():
    box = ser.box_serialization((2, 2), vocab_size=7, precision=3, low=-1.0, high=1.0)
    values = jnp.linspace(-1.5, 1.5, 3 * 4 * 4).reshape(3, 4, 2, 2)
    eager = ser.serialize(box, values)
    assert eager.shape == (3, 4, 12)
    np.testing.assert_array_equal(jax.jit(lambda v: ser.serialize(box, v))(values), eager)
    np.testing.assert_array_equal(jax.vmap(lambda v: ser.serialize(box, v))(values), eager)
    # A serialization is hashable, so it can be a static argument.
    np.testing.assert_array_equal(jax.jit(ser.serialize, static_argnums=0)(box, values), eager)
    # XLA may fuse the compiled affine map differently (an ulp apart).
    np.testing.assert_allclose(
        jax.jit(jax.vmap(lambda t: ser.deserialize(box, t)))(eager),
        ser.deserialize(box, eager),
        rtol=0,
        atol=2 * F32_EPS,
    )
    discrete = ser.discrete_serialization(5, vocab_size=5)
    np.testing.assert_array_equal(
        jax.jit(lambda v: ser.serialize(discrete, v))(jnp.arange(5)), np.arange(5)[:, None]
    )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: ser.box_serialization((2,), vocab_size=1), r"vocab_size=1 must be an int >= 2"),
        (lambda: ser.discrete_serialization(3, vocab_size=0), r"vocab_size=0"),
        (lambda: ser.box_serialization((2,), 8, precision=0), r"precision=0 must be an int >= 1"),
        (
            lambda: ser.box_serialization((2,), 8, low=[0.0, 1.0], high=[1.0, 1.0]),
            r"element 1 is low=1.0, high=1.0",
        ),
        (
            lambda: ser.box_serialization((1,), 8, low=200.0, high=300.0),
            r"low=200.0, high=100.0",
        ),
        (lambda: ser.box_serialization((2,), 8, clip_range=(1.0, -1.0)), r"clip_range=\(1.0"),
        (lambda: ser.discrete_serialization(9, vocab_size=8), r"9 categories .* vocab_size=8"),
        (
            lambda: ser.action_serialization(gymnasium.spaces.Box(-1.0, 1.0, (2,)), 8),
            r"Box action space of shape \(2,\) is refused for serialized policies",
        ),
        (
            lambda: ser.action_serialization(
                ActionSpec(kind="continuous", shape=(3,), low=(0.0,) * 3, high=(1.0,) * 3), 8
            ),
            r"Box action space of shape \(3,\) is refused",
        ),
        (
            lambda: ser.action_serialization(gymnasium.spaces.MultiDiscrete([2, 3]), 8),
            r"unequal categories \[2, 3\]",
        ),
        (
            lambda: ser.space_serialization(gymnasium.spaces.Discrete(3, start=1), 8),
            r"start=1 is not supported",
        ),
        (
            lambda: ser.init_rewards_to_actions(gymnasium.spaces.Discrete(2), 3, vocab_size=8),
            r"pass observation=",
        ),
    ],
)
def test_bad_configurations_raise_a_value_error_naming_the_value(build, match):
    with pytest.raises(ser.SerializationError, match=match) as raised:
        build()
    assert isinstance(raised.value, SpaceError) and isinstance(raised.value, ValueError)


def test_tokens_outside_the_vocabulary_are_refused():
    box = ser.box_serialization((2,), vocab_size=8, precision=2, low=0.0, high=1.0)
    with pytest.raises(ser.SerializationError, match=r"token 8 at index \(1, 3\).*\[0, 8\)"):
        ser.deserialize(box, np.array([[0, 1, 2, 3], [4, 5, 6, 8]]))
    with pytest.raises(ser.SerializationError, match=r"token -1 at index \(0, 0\)"):
        ser.deserialize(box, np.array([[-1, 1, 2, 3]]))
    actions = ser.action_serialization(gymnasium.spaces.MultiDiscrete([3, 3]), vocab_size=8)
    with pytest.raises(ser.SerializationError, match=r"token 3 at index \(0, 1\).*\[0, 3\)"):
        ser.deserialize(actions, np.array([[2, 3]]))
    with pytest.raises(ser.SerializationError, match="must be integers, got dtype float32"):
        ser.deserialize(box, np.zeros((1, 4), np.float32))
    with pytest.raises(
        ser.SerializationError, match=r"tokens of shape \(1, 3\) must end in \(4,\)"
    ):
        ser.deserialize(box, np.zeros((1, 3), np.int32))


def test_bad_values_are_refused():
    discrete = ser.discrete_serialization(4, vocab_size=8)
    with pytest.raises(ser.SerializationError, match=r"value 4 at index \(2, 0\).*\[0, 4\)"):
        ser.serialize(discrete, np.array([0, 3, 4]))
    with pytest.raises(ser.SerializationError, match="must be integers, got dtype float32"):
        ser.serialize(discrete, np.array([0.0, 1.0], np.float32))
    box = ser.box_serialization((2,), vocab_size=8)
    with pytest.raises(ser.SerializationError, match="NaN"):
        ser.serialize(box, np.array([[0.0, np.nan]]))
    with pytest.raises(ser.SerializationError, match=r"values of shape \(3,\) must end in \(2,\)"):
        ser.serialize(box, np.zeros(3))


# ----------------------------------------------------------------------------- layout


@pytest.mark.parametrize("obs_tokens, action_tokens, n_steps", [(1, 1, 1), (4, 1, 3), (3, 2, 5)])
def test_layout_positions_match_a_plain_loop(obs_tokens, action_tokens, n_steps):
    layout = ser.TokenLayout(obs_tokens, action_tokens, n_steps)
    observation_positions, action_positions, kinds = [], [], []
    position = 0
    for _ in range(n_steps):
        observation_positions.append(list(range(position, position + obs_tokens)))
        position += obs_tokens
        action_positions.append(list(range(position, position + action_tokens)))
        position += action_tokens
        kinds += ["o"] * obs_tokens + ["a"] * action_tokens
    assert layout.n_tokens == position
    np.testing.assert_array_equal(layout.observation_positions, observation_positions)
    np.testing.assert_array_equal(layout.action_positions, action_positions)
    np.testing.assert_array_equal(layout.value_positions, [p[0] for p in action_positions])
    np.testing.assert_array_equal(layout.action_mask, np.array(kinds) == "a")
    np.testing.assert_array_equal(layout.observation_mask, np.array(kinds) == "o")


def test_serialize_history_interleaves_steps_like_a_plain_loop():
    observation = ser.box_serialization((2,), vocab_size=10, precision=2, low=0.0, high=1.0)
    action = ser.action_serialization(gymnasium.spaces.MultiDiscrete([3, 3, 3]), vocab_size=10)
    rng = np.random.default_rng(0)
    observations = rng.uniform(0, 1, (2, 4, 2)).astype(np.float32)
    actions = rng.integers(0, 3, (2, 4, 3))
    tokens = np.asarray(ser.serialize_history(observation, action, observations, actions))

    expected = []
    for b in range(2):
        row = []
        for t in range(4):
            row += list(np.asarray(ser.serialize(observation, observations[b, t][None]))[0])
            row += list(actions[b, t])
        expected.append(row)
    np.testing.assert_array_equal(tokens, expected)

    layout = ser.token_layout(observation, action, 4)
    obs_tokens, action_tokens = ser.split_interleaved(layout, tokens)
    np.testing.assert_array_equal(tokens[:, layout.action_positions], action_tokens)
    np.testing.assert_array_equal(ser.deserialize(action, action_tokens), actions)
    np.testing.assert_array_equal(ser.interleave(layout, obs_tokens, action_tokens), tokens)


def test_serialize_trajectory_pads_one_step_and_masks_like_trax():
    observation = ser.discrete_serialization(5, vocab_size=6)
    action = ser.action_serialization(gymnasium.spaces.MultiDiscrete([6, 6]), vocab_size=6)
    observations = np.array([[1, 2, 3, 4], [4, 3, 2, 1]])  # [B, T + 1]
    actions = np.array([[[1, 2], [3, 4], [5, 0]], [[5, 5], [4, 4], [0, 0]]])  # [B, T, 2]
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    tokens, token_mask = ser.serialize_trajectory(observation, action, observations, actions, mask)
    expected_tokens, expected_mask = [], []
    for b in range(2):
        row = []
        for t in range(3):
            row += [observations[b, t], *actions[b, t]]
        row += [observations[b, 3], 0, 0]
        expected_tokens.append(row)
        valid = int(mask[b].sum()) * 3 + 1
        expected_mask.append([1] * valid + [0] * (len(row) - valid))
    np.testing.assert_array_equal(tokens, expected_tokens)
    np.testing.assert_array_equal(token_mask, expected_mask)
    with pytest.raises(ser.SerializationError, match="T \\+ 1 observations, T actions"):
        ser.serialize_trajectory(observation, action, observations[:, :3], actions, mask)


# ----------------------------------------------------------------------------- rewards -> actions


def loop_identity_map(n_timesteps, n_controls):
    matrix = np.zeros((n_timesteps, n_timesteps * n_controls))
    for t in range(n_timesteps):
        for c in range(n_controls):
            matrix[t, t * n_controls + c] = 1.0
    return matrix


def loop_serialized_map(n_timesteps, obs_tokens, action_tokens):
    step = obs_tokens + action_tokens
    matrix = np.zeros((n_timesteps, n_timesteps * step))
    for t in range(n_timesteps):
        start = t * step + obs_tokens
        for j in range(action_tokens):
            matrix[t, start + j] = 1.0
    return matrix


ACTION_SPACES = [
    gymnasium.spaces.Discrete(4),
    gymnasium.spaces.MultiDiscrete([3, 3, 3]),
    gymnax_spaces.Discrete(2),
]


@pytest.mark.parametrize("action_space", ACTION_SPACES)
@pytest.mark.parametrize("n_timesteps", [1, 5])
def test_rewards_to_actions_without_serialization_is_the_identity_per_control(
    action_space, n_timesteps
):
    n_controls = action_spec_from_space(action_space).n_controls
    expected = loop_identity_map(n_timesteps, n_controls)
    for action in (action_space, action_spec_from_space(action_space)):
        matrix = ser.init_rewards_to_actions(action, n_timesteps)
        assert matrix.dtype == np.float32
        np.testing.assert_array_equal(matrix, expected)


OBSERVATIONS = [
    gymnasium.spaces.Box(-1.0, 1.0, (2, 3)),
    gymnasium.spaces.Discrete(4),
    EnvSpec((5,), np.float32, ActionSpec(kind="discrete", n_actions=2)),
]


@pytest.mark.parametrize("observation", OBSERVATIONS)
@pytest.mark.parametrize("action_space", ACTION_SPACES)
@pytest.mark.parametrize("precision", [1, 3])
def test_rewards_to_actions_with_serialization_marks_each_steps_action_tokens(
    observation, action_space, precision
):
    n_timesteps = 4
    matrix = ser.init_rewards_to_actions(
        action_space, n_timesteps, vocab_size=8, observation=observation, precision=precision
    )
    obs_tokens = ser.observation_serialization(observation, 8, precision).n_tokens
    n_controls = action_spec_from_space(action_space).n_controls
    expected = loop_serialized_map(n_timesteps, obs_tokens, n_controls)
    np.testing.assert_array_equal(matrix, expected)
    # Trax's shape: (n_timesteps, representation_length), one entry per control and step.
    assert matrix.shape == (n_timesteps, n_timesteps * (obs_tokens + n_controls))
    np.testing.assert_array_equal(matrix.sum(axis=1), [n_controls] * n_timesteps)


@pytest.mark.parametrize("n_controls", [1, 3])
def test_rewards_to_actions_scatters_advantages_and_gathers_values(n_controls):
    observation = ser.box_serialization((2,), vocab_size=8, precision=2)
    action = ser.action_serialization(
        gymnasium.spaces.MultiDiscrete([4] * n_controls)
        if n_controls > 1
        else gymnasium.spaces.Discrete(4),
        vocab_size=8,
    )
    n_rewards = 3
    layout = ser.token_layout(observation, action, n_rewards + 1)
    matrix = ser.rewards_to_actions_map(layout)
    advantages = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]])
    # Trax pads the per-step advantages by one step to match the value step.
    padded = np.pad(advantages, ((0, 0), (0, 1)))
    scattered = np.asarray(ser.scatter_to_actions(padded, matrix))

    expected = np.zeros((2, layout.n_tokens))
    for b in range(2):
        for t in range(n_rewards):
            for c in range(n_controls):
                expected[b, t * layout.step_tokens + observation.n_tokens + c] = advantages[b, t]
    np.testing.assert_allclose(scattered, expected)

    per_token_values = np.arange(2 * layout.n_tokens, dtype=np.float32).reshape(2, -1)
    values = ser.gather_at_steps(per_token_values, layout.value_positions)
    expected_values = [
        [per_token_values[b, t * layout.step_tokens + observation.n_tokens] for t in range(4)]
        for b in range(2)
    ]
    np.testing.assert_array_equal(values, expected_values)


def test_layout_refuses_mismatched_vocabularies():
    with pytest.raises(ser.SerializationError, match="vocab_size=8 and action vocab_size=4"):
        ser.token_layout(
            ser.box_serialization((1,), 8), ser.discrete_serialization(2, vocab_size=4), 2
        )
