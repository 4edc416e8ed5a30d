"""Observations and actions as token sequences, for policies that read and write tokens.

A serialized (token) policy sees a history as one sequence of integers in ``[0, vocab_size)``
(Trax's ``policy_and_value_vocab_size``):

* Box: every dimension is clipped to ``[low, high]`` (the space's bounds, themselves clipped to
  ``clip_range``, Trax's ``max_range``) and written as ``precision`` digits in base
  ``vocab_size``, most significant first; dimensions in C order, so a Box of ``d`` elements
  takes ``d * precision`` tokens.
* Discrete(n): one token, the value itself (``n <= vocab_size``).
* MultiDiscrete: one token per control, the value itself (every category ``<= vocab_size``).
  Action spaces keep ``analyze_action_space``'s semantics: equal categories only, and Box
  actions are refused (a token policy emits categorical choices).

``serialize`` / ``deserialize`` are pure JAX over any leading batch shape, usable inside
``jit`` / ``vmap`` (a ``SpaceSerialization`` is a frozen, hashable dataclass: close over it or
pass it as a static argument). Round trips are exact for discrete spaces; a Box value comes back
as the centre of its quantisation bin, within half a step (``quantisation_step``) of the
clipped value (Trax returns the bin's lower edge; the centre halves the worst error and makes
tokens -> values -> tokens exact while ``vocab_size ** precision`` is well inside float32).

Bad values and tokens are refused with ``SerializationError`` when the arrays are concrete;
under ``jit`` a traced array cannot raise, so validate at the host boundary with
``check_tokens``.

``TokenLayout`` places K steps as ``[o_1, a_1, ..., o_K, a_K]`` and tells where action logits
and values are read; ``rewards_to_actions_map`` is Trax's linear map from per-step quantities
(rewards, advantages, masks) onto the action tokens of that layout.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from heron.specs import ActionSpec, EnvSpec, SpaceError, analyze_action_space

DEFAULT_PRECISION = 2
DEFAULT_CLIP_RANGE = (-100.0, 100.0)
KINDS = ("box", "discrete", "multi_discrete")


class SerializationError(SpaceError):
    """A serialization that cannot be built, or values or tokens it cannot read."""


# ----------------------------------------------------------------------------- the description


@dataclasses.dataclass(frozen=True)
class SpaceSerialization:
    """How one observation or action is written as tokens.

    kind: "box", "discrete" (one token) or "multi_discrete" (one token per element).
    vocab_size: number of distinct tokens, >= 2.
    shape: the shape of one value: a Box's shape, () for Discrete, the nvec shape for
        MultiDiscrete.
    precision: digits per Box element (base ``vocab_size``); 1 for the discrete kinds.
    low, high: per-element clip range of a Box, flattened in C order (empty otherwise).
    nvec: per-element number of categories of the discrete kinds, flattened (empty for Box).
    """

    kind: Literal["box", "discrete", "multi_discrete"]
    vocab_size: int
    shape: tuple[int, ...]
    precision: int = 1
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    nvec: tuple[int, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SerializationError(f"kind={self.kind!r} is not one of {KINDS}")
        _check_int("vocab_size", self.vocab_size, minimum=2)
        _check_int("precision", self.precision, minimum=1)
        if not all(isinstance(d, int) and d >= 1 for d in self.shape):
            raise SerializationError(
                f"shape={self.shape} must be a tuple of positive ints (one value's shape)"
            )
        if self.kind == "box":
            self._check_box()
        else:
            self._check_discrete()

    def _check_box(self):
        if self.nvec:
            raise SerializationError(f"a box serialization has no nvec, got nvec={self.nvec}")
        if len(self.low) != self.size or len(self.high) != self.size:
            raise SerializationError(
                f"low and high need one entry per element of shape {self.shape} ({self.size}), "
                f"got {len(self.low)} and {len(self.high)}"
            )
        low = np.asarray(self.low, np.float32)
        high = np.asarray(self.high, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            width = high - low
        bad = ~(np.isfinite(low) & np.isfinite(high) & (low < high) & np.isfinite(width))
        if np.any(bad):
            i = int(np.argmax(bad))
            raise SerializationError(
                f"box clip range of element {i} is low={self.low[i]}, high={self.high[i]}: "
                "needs finite float32 bounds with low < high"
            )

    def _check_discrete(self):
        if self.precision != 1:
            raise SerializationError(
                f"precision={self.precision}: a {self.kind} value is one token per element, "
                "precision must be 1"
            )
        if self.low or self.high:
            raise SerializationError(f"a {self.kind} serialization has no low/high clip range")
        if self.kind == "discrete" and self.shape != ():
            raise SerializationError(f"a discrete value is a scalar, got shape={self.shape}")
        if self.kind == "multi_discrete" and self.shape == ():
            raise SerializationError("a multi_discrete value needs a non-scalar shape, got ()")
        if len(self.nvec) != self.size:
            raise SerializationError(
                f"nvec={self.nvec} needs one entry per element of shape {self.shape} ({self.size})"
            )
        for n in self.nvec:
            if not isinstance(n, int) or not 1 <= n <= self.vocab_size:
                raise SerializationError(
                    f"{n} categories cannot be written in a vocabulary of "
                    f"vocab_size={self.vocab_size}: every category count must be in "
                    f"[1, {self.vocab_size}]"
                )

    @property
    def size(self) -> int:
        """Number of elements of one value."""
        return math.prod(self.shape)

    @property
    def n_tokens(self) -> int:
        """Tokens per value: ``size * precision`` for a Box, ``size`` otherwise."""
        return self.size * self.precision

    @property
    def value_dtype(self):
        return np.float32 if self.kind == "box" else np.int32

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Box clip range (low, high), each float32 [*shape]."""
        self._require_box("bounds")
        return (
            np.asarray(self.low, np.float32).reshape(self.shape),
            np.asarray(self.high, np.float32).reshape(self.shape),
        )

    @property
    def quantisation_step(self) -> np.ndarray:
        """Box bin width per element, float64 [*shape]: ``(high - low) / vocab_size**precision``."""
        self._require_box("quantisation_step")
        width = np.asarray(self.high, np.float64) - np.asarray(self.low, np.float64)
        return (width / float(self.vocab_size) ** self.precision).reshape(self.shape)

    @property
    def token_limits(self) -> np.ndarray:
        """Exclusive upper bound of every token, int32 [n_tokens].

        ``vocab_size`` for Box digits, the element's category count for the discrete kinds;
        a token policy masks its logits above these for action tokens.
        """
        if self.kind == "box":
            return np.full(self.n_tokens, self.vocab_size, np.int32)
        return np.asarray(self.nvec, np.int32)

    def _require_box(self, what: str):
        if self.kind != "box":
            raise SerializationError(f"{what} is defined for box serializations, not {self.kind}")


def _check_int(name: str, value: Any, minimum: int):
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise SerializationError(f"{name}={value!r} must be an int >= {minimum}")


def _check_clip_range(clip_range) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in clip_range)
    except (TypeError, ValueError) as error:
        raise SerializationError(
            f"clip_range={clip_range!r} must be a pair (low, high) of floats"
        ) from error
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise SerializationError(
            f"clip_range={clip_range!r} must be finite with low < high, e.g. (-100.0, 100.0)"
        )
    return lo, hi


# ----------------------------------------------------------------------------- constructors


def box_serialization(
    shape: tuple[int, ...],
    vocab_size: int,
    precision: int = DEFAULT_PRECISION,
    low=None,
    high=None,
    clip_range=DEFAULT_CLIP_RANGE,
) -> SpaceSerialization:
    """A Box of ``shape`` written as ``precision`` base-``vocab_size`` digits per element.

    low, high: the space's bounds (scalars or arrays broadcastable to ``shape``; None means
    unbounded). Each is clipped to ``clip_range`` (Trax's ``max_range``: some envs declare
    huge or infinite bounds that no fixed number of digits can resolve).
    """
    shape = tuple(int(d) for d in shape)
    clip_low, clip_high = _check_clip_range(clip_range)
    low = -np.inf if low is None else low
    high = np.inf if high is None else high
    try:
        low = np.broadcast_to(np.asarray(low, np.float64), shape)
        high = np.broadcast_to(np.asarray(high, np.float64), shape)
    except ValueError as error:
        raise SerializationError(
            f"box bounds of shapes {np.shape(low)} and {np.shape(high)} do not broadcast to "
            f"shape={shape}"
        ) from error
    low = np.maximum(low, clip_low).reshape(-1)
    high = np.minimum(high, clip_high).reshape(-1)
    return SpaceSerialization(
        kind="box",
        vocab_size=vocab_size,
        shape=shape,
        precision=precision,
        low=tuple(low.tolist()),
        high=tuple(high.tolist()),
    )


def discrete_serialization(n: int, vocab_size: int) -> SpaceSerialization:
    """Discrete(n) as one token."""
    return SpaceSerialization(kind="discrete", vocab_size=vocab_size, shape=(), nvec=(int(n),))


def multi_discrete_serialization(nvec, vocab_size: int) -> SpaceSerialization:
    """MultiDiscrete(nvec) as one token per element (C order)."""
    nvec = np.asarray(nvec)
    return SpaceSerialization(
        kind="multi_discrete",
        vocab_size=vocab_size,
        shape=tuple(int(d) for d in nvec.shape),
        nvec=tuple(int(n) for n in nvec.reshape(-1)),
    )


def space_serialization(
    space, vocab_size: int, precision: int = DEFAULT_PRECISION, clip_range=DEFAULT_CLIP_RANGE
) -> SpaceSerialization:
    """The serialization of a Gymnasium or gymnax observation space.

    Discrete and MultiDiscrete (unequal categories allowed, as Trax) become one token per
    element; Box becomes digits over its bounds clipped to ``clip_range``.
    """
    _check_zero_start(space)
    if hasattr(space, "nvec"):
        return multi_discrete_serialization(space.nvec, vocab_size)
    for attribute in ("n", "num_categories"):
        if hasattr(space, attribute):
            return discrete_serialization(int(getattr(space, attribute)), vocab_size)
    if (
        hasattr(space, "low")
        and hasattr(space, "high")
        and getattr(space, "shape", None) is not None
    ):
        return box_serialization(
            tuple(space.shape), vocab_size, precision, space.low, space.high, clip_range
        )
    raise SerializationError(
        f"cannot serialize space {space!r}: expected Box, Discrete or MultiDiscrete"
    )


def _check_zero_start(space):
    start = getattr(space, "start", None)
    if start is not None and np.any(np.asarray(start) != 0):
        raise SerializationError(
            f"{type(space).__name__} with start={np.asarray(start).tolist()} is not supported: "
            "tokens are the values themselves, so categories must start at 0"
        )


def observation_serialization(
    observation: EnvSpec | Any,
    vocab_size: int,
    precision: int = DEFAULT_PRECISION,
    clip_range=DEFAULT_CLIP_RANGE,
) -> SpaceSerialization:
    """The serialization of observations, from an ``EnvSpec`` or an observation space.

    An EnvSpec carries the observation shape but no bounds, so its observations are a Box over
    ``clip_range``; pass the space itself to use its bounds or its categories.
    """
    if isinstance(observation, EnvSpec):
        return box_serialization(
            observation.observation_shape, vocab_size, precision, clip_range=clip_range
        )
    return space_serialization(observation, vocab_size, precision, clip_range)


def action_serialization(action: ActionSpec | Any, vocab_size: int) -> SpaceSerialization:
    """The serialization of discrete actions, from an ``ActionSpec`` or an action space.

    Discrete(n) -> one token; MultiDiscrete with k equal categories -> k tokens (one per
    control). Box actions and unequal MultiDiscrete are refused (``analyze_action_space``).
    """
    if isinstance(action, ActionSpec):
        if not action.is_discrete:
            raise _box_actions_error(action.shape)
        n_controls, n_actions, multi = action.n_controls, action.n_actions, action.multi_control
    else:
        _check_zero_start(action)
        try:
            n_controls, n_actions = analyze_action_space(action)
        except SpaceError as error:
            if hasattr(action, "low") and not hasattr(action, "nvec"):
                raise _box_actions_error(tuple(action.shape)) from error
            raise SerializationError(f"cannot serialize actions: {error}") from error
        multi = hasattr(action, "nvec")
    if multi:
        return multi_discrete_serialization([n_actions] * n_controls, vocab_size)
    return discrete_serialization(n_actions, vocab_size)


def _box_actions_error(shape) -> SerializationError:
    return SerializationError(
        f"Box action space of shape {shape} is refused for serialized policies: a token policy "
        "emits categorical choices, so actions must be Discrete or MultiDiscrete with equal "
        "categories (discretise the Box with a wrapper, or use policy_and_value_vocab_size=None)"
    )


# ----------------------------------------------------------------------------- values <-> tokens


def serialize(serialization: SpaceSerialization, values) -> jax.Array:
    """Values to tokens.

    Args:
      serialization: how one value is written.
      values: [*batch, *serialization.shape]; float for a Box (clipped to its range), ints in
        ``[0, nvec)`` for the discrete kinds.

    Returns:
      int32 [*batch, serialization.n_tokens].
    """
    values = jnp.asarray(values)
    batch_shape = _batch_shape(values.shape, serialization.shape, "values")
    flat = values.reshape(batch_shape + (serialization.size,))
    if serialization.kind == "box":
        if _is_concrete(flat) and np.any(np.isnan(np.asarray(flat))):
            raise SerializationError("box values contain NaN: there is no token for NaN")
        low, high = serialization.bounds
        digits = _box_digits(
            flat.astype(jnp.float32),
            low.reshape(-1),
            high.reshape(-1),
            serialization.vocab_size,
            serialization.precision,
        )
        return digits.reshape(batch_shape + (serialization.n_tokens,))
    if not jnp.issubdtype(flat.dtype, jnp.integer):
        raise SerializationError(
            f"{serialization.kind} values must be integers, got dtype {flat.dtype}"
        )
    _check_in_range(flat, serialization.token_limits, "value")
    return flat.astype(jnp.int32)


def deserialize(serialization: SpaceSerialization, tokens) -> jax.Array:
    """Tokens to values.

    Args:
      serialization: how one value is written.
      tokens: ints [*batch, serialization.n_tokens], each below its ``token_limits`` entry.

    Returns:
      [*batch, *serialization.shape]: float32 bin centres for a Box, int32 otherwise.
    """
    tokens = jnp.asarray(tokens)
    batch_shape = _batch_shape(tokens.shape, (serialization.n_tokens,), "tokens")
    check_tokens(serialization, tokens)
    if serialization.kind != "box":
        return tokens.astype(jnp.int32).reshape(batch_shape + serialization.shape)
    digits = tokens.reshape(batch_shape + (serialization.size, serialization.precision))
    low, high = serialization.bounds
    values = _box_values(digits, low.reshape(-1), high.reshape(-1), serialization.vocab_size)
    return values.reshape(batch_shape + serialization.shape)


def check_tokens(serialization: SpaceSerialization, tokens) -> None:
    """Raises SerializationError unless ``tokens`` [..., n_tokens] are ints within the vocabulary.

    Dtype and shape are checked always; values only when ``tokens`` is concrete (not traced).
    """
    tokens = jnp.asarray(tokens)
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise SerializationError(f"tokens must be integers, got dtype {tokens.dtype}")
    _batch_shape(tokens.shape, (serialization.n_tokens,), "tokens")
    _check_in_range(tokens, serialization.token_limits, "token")


def _box_digits(flat, low, high, vocab_size: int, precision: int) -> jax.Array:
    """[..., d] floats -> [..., d, precision] int32 digits, most significant first."""
    fraction = jnp.clip((flat - low) / (high - low), 0.0, 1.0)
    digits = []
    for _ in range(precision):
        scaled = fraction * vocab_size
        # fraction == 1 (a value at high) belongs to the top bin: every digit vocab_size - 1.
        digit = jnp.minimum(jnp.floor(scaled), vocab_size - 1)
        digits.append(digit.astype(jnp.int32))
        fraction = scaled - digit
    return jnp.stack(digits, axis=-1)


def _box_values(digits, low, high, vocab_size: int) -> jax.Array:
    """[..., d, precision] digits -> [..., d] float32 bin centres (Horner's rule)."""
    fraction = jnp.full(digits.shape[:-1], 0.5, jnp.float32)
    for i in reversed(range(digits.shape[-1])):
        fraction = (fraction + digits[..., i].astype(jnp.float32)) / vocab_size
    return low + fraction * (high - low)


def _batch_shape(shape, item_shape, what: str) -> tuple[int, ...]:
    item_shape = tuple(item_shape)
    n = len(item_shape)
    if len(shape) < n or tuple(shape[len(shape) - n :]) != item_shape:
        raise SerializationError(
            f"{what} of shape {tuple(shape)} must end in {item_shape} ([*batch, *{item_shape}])"
        )
    return tuple(shape[: len(shape) - n])


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_in_range(x, limits: np.ndarray, what: str):
    """x [..., m] ints must lie in [0, limits[j]) along the last axis (checked when concrete)."""
    if not _is_concrete(x):
        return
    x = np.asarray(x)
    bad = (x < 0) | (x >= limits)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise SerializationError(
            f"{what} {int(x[index])} at index {index} is outside its vocabulary: element "
            f"{index[-1]} takes values in [0, {int(limits[index[-1]])})"
        )


# ----------------------------------------------------------------------------- interleaved layout


@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """Where each token of an interleaved history of ``n_steps`` steps sits.

    The sequence is ``[o_0, a_0, o_1, a_1, ..., o_{K-1}, a_{K-1}]``: step t holds its
    observation's ``observation_tokens`` tokens then its action's ``action_tokens`` tokens, at
    positions ``[t * step_tokens, (t + 1) * step_tokens)``.

    The token model is assumed to see the sequence shifted right by one (Trax's ShiftRight:
    the output at position j depends on tokens < j and predicts token j). So action logits are
    read at the action tokens' own positions, and step t's value at its first action token, the
    step boundary: it has seen o_0..o_t and a_0..a_{t-1} but not a_t.
    """

    observation_tokens: int
    action_tokens: int
    n_steps: int

    def __post_init__(self):
        _check_int("observation_tokens", self.observation_tokens, minimum=1)
        _check_int("action_tokens", self.action_tokens, minimum=1)
        _check_int("n_steps", self.n_steps, minimum=1)

    @property
    def step_tokens(self) -> int:
        return self.observation_tokens + self.action_tokens

    @property
    def n_tokens(self) -> int:
        return self.n_steps * self.step_tokens

    @property
    def observation_positions(self) -> np.ndarray:
        """int32 [n_steps, observation_tokens]: positions of each step's observation tokens."""
        starts = np.arange(self.n_steps)[:, None] * self.step_tokens
        return (starts + np.arange(self.observation_tokens)).astype(np.int32)

    @property
    def action_positions(self) -> np.ndarray:
        """int32 [n_steps, action_tokens]: positions of each step's action tokens (logits read)."""
        starts = np.arange(self.n_steps)[:, None] * self.step_tokens + self.observation_tokens
        return (starts + np.arange(self.action_tokens)).astype(np.int32)

    @property
    def value_positions(self) -> np.ndarray:
        """int32 [n_steps]: step boundaries, each step's first action token (values read)."""
        return self.action_positions[:, 0]

    @property
    def action_mask(self) -> np.ndarray:
        """bool [n_tokens]: True at action tokens."""
        mask = np.zeros(self.n_tokens, bool)
        mask[self.action_positions.reshape(-1)] = True
        return mask

    @property
    def observation_mask(self) -> np.ndarray:
        """bool [n_tokens]: True at observation tokens."""
        return ~self.action_mask


def token_layout(
    observation: SpaceSerialization, action: SpaceSerialization, n_steps: int
) -> TokenLayout:
    """The layout of ``n_steps`` interleaved (observation, action) steps."""
    if observation.vocab_size != action.vocab_size:
        raise SerializationError(
            f"observation vocab_size={observation.vocab_size} and action "
            f"vocab_size={action.vocab_size} differ: one token model reads both"
        )
    return TokenLayout(observation.n_tokens, action.n_tokens, n_steps)


def interleave(layout: TokenLayout, observation_tokens, action_tokens) -> jax.Array:
    """[*B, K, O] observation tokens and [*B, K, A] action tokens -> [*B, K * (O + A)]."""
    observation_tokens = jnp.asarray(observation_tokens)
    action_tokens = jnp.asarray(action_tokens)
    k = layout.n_steps
    batch = _batch_shape(observation_tokens.shape, (k, layout.observation_tokens), "obs tokens")
    action_batch = _batch_shape(action_tokens.shape, (k, layout.action_tokens), "action tokens")
    if batch != action_batch:
        raise SerializationError(
            f"observation tokens batch {batch} and action tokens batch {action_batch} differ"
        )
    steps = jnp.concatenate([observation_tokens, action_tokens], axis=-1)
    return steps.reshape(batch + (layout.n_tokens,))


def split_interleaved(layout: TokenLayout, tokens) -> tuple[jax.Array, jax.Array]:
    """[*B, K * (O + A)] -> ([*B, K, O] observation tokens, [*B, K, A] action tokens)."""
    tokens = jnp.asarray(tokens)
    batch = _batch_shape(tokens.shape, (layout.n_tokens,), "tokens")
    steps = tokens.reshape(batch + (layout.n_steps, layout.step_tokens))
    return steps[..., : layout.observation_tokens], steps[..., layout.observation_tokens :]


def serialize_history(
    observation: SpaceSerialization, action: SpaceSerialization, observations, actions
) -> jax.Array:
    """K (observation, action) steps -> interleaved tokens.

    Args:
      observations: [*B, K, *observation.shape].
      actions: [*B, K, *action.shape].

    Returns:
      int32 [*B, K * (observation.n_tokens + action.n_tokens)], laid out as
      ``token_layout(observation, action, K)``.
    """
    observations = jnp.asarray(observations)
    n_steps = _steps(observations.shape, observation.shape, "observations")
    layout = token_layout(observation, action, n_steps)
    return interleave(layout, serialize(observation, observations), serialize(action, actions))


def serialize_trajectory(
    observation: SpaceSerialization, action: SpaceSerialization, observations, actions, mask
) -> tuple[jax.Array, jax.Array]:
    """A padded trajectory of T steps -> tokens over T + 1 steps and their validity mask.

    Trax's ``serialize_observations_and_actions``: the T + 1'th step holds the last observation
    and padding (zero) action tokens, so the last value (for bootstrapping) has a boundary.

    Args:
      observations: [*B, T + 1, *observation.shape].
      actions: [*B, T, *action.shape].
      mask: [*B, T], 1 on the valid prefix of each trajectory, 0 on padding.

    Returns:
      tokens int32 [*B, (T + 1) * S] laid out as ``token_layout(observation, action, T + 1)``
      and token_mask int32 [*B, (T + 1) * S], 1 on the first ``n * S + O`` tokens where n is
      the number of valid steps (S = step tokens, O = observation tokens).
    """
    observations = jnp.asarray(observations)
    actions = jnp.asarray(actions)
    mask = jnp.asarray(mask)
    n_steps = _steps(observations.shape, observation.shape, "observations")
    n_actions = _steps(actions.shape, action.shape, "actions")
    if n_actions != n_steps - 1 or mask.shape != actions.shape[: actions.ndim - len(action.shape)]:
        raise SerializationError(
            f"a trajectory needs T + 1 observations, T actions and a [*B, T] mask; got "
            f"{n_steps} observations, {n_actions} actions and a mask of shape {mask.shape}"
        )
    layout = token_layout(observation, action, n_steps)
    steps_axis = mask.ndim - 1
    padding = jnp.zeros(mask.shape[:steps_axis] + (1,) + action.shape, actions.dtype)
    padded_actions = jnp.concatenate([actions, padding], axis=steps_axis)
    tokens = serialize_history(observation, action, observations, padded_actions)
    lengths = jnp.sum(mask, axis=-1).astype(jnp.int32) * layout.step_tokens
    lengths = lengths + layout.observation_tokens
    token_mask = jnp.arange(layout.n_tokens) < lengths[..., None]
    return tokens, token_mask.astype(jnp.int32)


def _steps(shape, item_shape, what: str) -> int:
    batch = _batch_shape(shape, item_shape, what)
    if not batch:
        raise SerializationError(
            f"{what} of shape {tuple(shape)} need a steps axis before "
            f"the value shape {tuple(item_shape)}"
        )
    return int(batch[-1])


# ----------------------------------------------------------------------------- rewards -> actions


def rewards_to_actions_map(layout: TokenLayout) -> np.ndarray:
    """Trax's serialized rewards-to-actions map, float32 [n_steps, n_tokens].

    Row t is 1 at step t's action tokens: ``per_step @ map`` scatters per-step advantages
    (or the reward mask) onto the action tokens' log-probs, one entry per control. Build the
    layout over T + 1 steps for T rewards so the map also covers the bootstrap value's step.
    """
    matrix = np.zeros((layout.n_steps, layout.n_tokens), np.float32)
    np.put_along_axis(matrix, layout.action_positions, 1.0, axis=1)
    return matrix


def identity_rewards_to_actions(n_timesteps: int, n_controls: int) -> np.ndarray:
    """The unserialized map, float32 [n_timesteps, n_timesteps * n_controls].

    The identity broadcast over controls: column ``t * n_controls + c`` is control c of step t.
    """
    _check_int("n_timesteps", n_timesteps, minimum=1)
    _check_int("n_controls", n_controls, minimum=1)
    eye = np.eye(n_timesteps, dtype=np.float32)[:, :, None]
    matrix = np.broadcast_to(eye, (n_timesteps, n_timesteps, n_controls))
    return matrix.reshape(n_timesteps, n_timesteps * n_controls)


def init_rewards_to_actions(
    action: ActionSpec | Any,
    n_timesteps: int,
    vocab_size: int | None = None,
    observation: EnvSpec | Any = None,
    precision: int = DEFAULT_PRECISION,
    clip_range=DEFAULT_CLIP_RANGE,
) -> np.ndarray:
    """Trax's ``init_rewards_to_actions``: the map for a policy with or without serialization.

    Args:
      action: ActionSpec or action space (Discrete or equal MultiDiscrete).
      n_timesteps: steps covered, T + 1 for T rewards (the extra one for the last value).
      vocab_size: None for a policy on raw observations, else the token vocabulary.
      observation: EnvSpec or observation space; needed when ``vocab_size`` is given.

    Returns:
      float32 [n_timesteps, n_timesteps * n_controls] without serialization,
      [n_timesteps, n_timesteps * (O + A)] with it.
    """
    if vocab_size is None:
        if isinstance(action, ActionSpec):
            if not action.is_discrete:
                raise SerializationError(
                    f"Box action space of shape {action.shape} has no (n_controls, n_actions) "
                    "analysis: the rewards-to-actions map needs discrete actions"
                )
            n_controls = action.n_controls
        else:
            n_controls, _ = analyze_action_space(action)
        return identity_rewards_to_actions(n_timesteps, n_controls)
    if observation is None:
        raise SerializationError(
            f"vocab_size={vocab_size} serializes observations: pass observation= (an EnvSpec or "
            "an observation space)"
        )
    layout = token_layout(
        observation_serialization(observation, vocab_size, precision, clip_range),
        action_serialization(action, vocab_size),
        n_timesteps,
    )
    return rewards_to_actions_map(layout)


def scatter_to_actions(per_step, rewards_to_actions) -> jax.Array:
    """[*B, T] per-step quantities -> [*B, L] on the action tokens (0 elsewhere)."""
    return jnp.asarray(per_step) @ jnp.asarray(rewards_to_actions)


def gather_at_steps(per_token, positions) -> jax.Array:
    """[*B, L] per-token outputs -> [*B, T] read at ``positions`` [T] (e.g. value_positions)."""
    return jnp.take(jnp.asarray(per_token), jnp.asarray(positions), axis=-1)
