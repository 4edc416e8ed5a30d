"""Specs of environments and actions, and the analysis of action spaces.

Spaces may come from Gymnasium or gymnax; both are read through their public attributes
(``n`` / ``num_categories``, ``nvec``, ``low`` / ``high`` / ``shape``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np


class SpaceError(ValueError):
    """An action or observation space heron cannot serve in the requested way."""


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """What an agent needs to know about actions.

    kind: "discrete" (Discrete or equal MultiDiscrete: ``n_controls`` categorical controls of
    ``n_actions`` choices each) or "continuous" (Box: ``shape``, ``low``, ``high``).
    ``multi_control`` tells a MultiDiscrete (actions [..., k]) from a Discrete (actions [...]).
    """

    kind: Literal["discrete", "continuous"]
    n_controls: int = 1
    n_actions: int = 0
    multi_control: bool = False
    shape: tuple[int, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @property
    def is_discrete(self) -> bool:
        return self.kind == "discrete"

    @property
    def action_shape(self) -> tuple[int, ...]:
        if self.is_discrete:
            return (self.n_controls,) if self.multi_control else ()
        return self.shape

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) shaped like one continuous action."""
        return np.reshape(self.low, self.shape), np.reshape(self.high, self.shape)

    @property
    def dtype(self):
        return np.int32 if self.is_discrete else np.float32


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Observation shape and dtype, the action spec and the episode time limit of an env."""

    observation_shape: tuple[int, ...]
    observation_dtype: Any
    action: ActionSpec
    max_episode_steps: int | None = None
    observation_categories: int | None = None  # Discrete(n) observations: n; None for a Box
    # whether time steps carry the legal actions (TimeStep.action_mask, shaped like the
    # discrete head's logits: [n], or [k, n] for k controls)
    action_mask: bool = False

    @property
    def action_mask_shape(self) -> tuple[int, ...]:
        action = self.action
        return (
            (action.n_controls, action.n_actions) if action.multi_control else (action.n_actions,)
        )


def check_action_masks(spec: EnvSpec, env_name: str) -> None:
    """Action masks need discrete actions: a mask rules out some of a categorical's choices."""
    if not spec.action.is_discrete:
        raise SpaceError(
            f"{env_name} gives action masks, but its actions are continuous (Box "
            f"{spec.action.shape}): masks rule out choices of Discrete or MultiDiscrete actions"
        )


def _space_name(space) -> str:
    return type(space).__name__


def _discrete_n(space) -> int | None:
    for attribute in ("n", "num_categories"):
        if hasattr(space, attribute) and not hasattr(space, "nvec"):
            return int(getattr(space, attribute))
    return None


def analyze_action_space(space) -> tuple[int, int]:
    """Returns ``(n_controls, n_actions)`` of a discrete action space (Trax semantics).

    Discrete(n) -> (1, n); MultiDiscrete with k equal categories n -> (k, n). MultiDiscrete
    with unequal categories and continuous (Box) spaces have no such analysis and raise
    ``SpaceError`` saying why.
    """
    n = _discrete_n(space)
    if n is not None:
        return 1, n
    if hasattr(space, "nvec"):
        nvec = np.asarray(space.nvec).reshape(-1)
        if len(nvec) == 0 or np.any(nvec != nvec[0]):
            raise SpaceError(
                f"MultiDiscrete action space with unequal categories {nvec.tolist()} is not "
                "supported: every control must have the same number of choices, e.g. [3, 3]"
            )
        return int(len(nvec)), int(nvec[0])
    if hasattr(space, "low") and hasattr(space, "shape"):
        raise SpaceError(
            f"{_space_name(space)} action space of shape {tuple(space.shape)} is continuous: a "
            "discrete (n_controls, n_actions) analysis needs Discrete or equal MultiDiscrete; "
            "continuous actions are served by Gaussian heads (see action_spec_from_space)"
        )
    raise SpaceError(
        f"unsupported action space {space!r}: expected Discrete, MultiDiscrete with equal "
        "categories, or Box"
    )


def observation_shape_from_space(space) -> tuple[int, ...]:
    """The array shape of a Box (or Discrete, as a scalar) observation space."""
    if hasattr(space, "low") and hasattr(space, "shape") and space.shape is not None:
        return tuple(int(d) for d in space.shape)
    if _discrete_n(space) is not None:
        return ()
    raise SpaceError(
        f"unsupported observation space {_space_name(space)} ({space!r}): heron agents take "
        "array observations (Box or Discrete); flatten Tuple/Dict spaces with a wrapper first"
    )


def is_image_space(space) -> bool:
    """Whether observations of ``space`` are images: a uint8 Box with bounds 0 and 255 (SB3's
    ``is_image_space``)."""
    if not (hasattr(space, "low") and hasattr(space, "high") and hasattr(space, "dtype")):
        return False
    return (
        np.dtype(space.dtype) == np.uint8
        and bool(np.all(np.asarray(space.low) == 0))
        and bool(np.all(np.asarray(space.high) == 255))
    )


def observation_dtype_from_space(space):
    """The dtype heron keeps observations of ``space`` in: uint8 for images (a quarter of
    float32's memory in replays; networks scale them to [0, 1]), float32 otherwise."""
    return np.uint8 if is_image_space(space) else np.float32


def observation_categories_from_space(space) -> int | None:
    """n of a Discrete(n) observation space (its values are the categories 0..n-1), else
    None."""
    return _discrete_n(space)


def action_spec_from_space(space) -> ActionSpec:
    """The ActionSpec of a Gymnasium or gymnax action space (Discrete, MultiDiscrete, Box)."""
    if _discrete_n(space) is not None or hasattr(space, "nvec"):
        n_controls, n_actions = analyze_action_space(space)
        return ActionSpec(
            kind="discrete",
            n_controls=n_controls,
            n_actions=n_actions,
            multi_control=hasattr(space, "nvec"),
        )
    if hasattr(space, "low") and hasattr(space, "shape"):
        shape = tuple(int(d) for d in space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape).reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise SpaceError(
                f"Box action space with infinite bounds (low={low.tolist()}, "
                f"high={high.tolist()}) is not supported: actions must be bounded"
            )
        return ActionSpec(
            kind="continuous",
            shape=shape,
            low=tuple(low.tolist()),
            high=tuple(high.tolist()),
        )
    raise SpaceError(
        f"unsupported action space {space!r}: expected Discrete, MultiDiscrete with equal "
        "categories, or Box"
    )
