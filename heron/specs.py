"""Specs of environments and actions, and the analysis of action spaces.

Spaces may come from Gymnasium or gymnax; both are read through their public attributes
(``n`` / ``num_categories``, ``nvec``, ``low`` / ``high`` / ``shape``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

# The logit of an action a mask rules out: finite, unlike -inf, so 0 * log(0) terms stay 0
# in entropies and gradients.
ILLEGAL_LOGIT = -1e9


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
class ObservationPart:
    """One leaf of a Dict or Tuple observation space: where it sits (``path``: the keys of
    Dicts and the indices of Tuples leading to it), its shape and what it holds."""

    path: tuple[str | int, ...]
    shape: tuple[int, ...]
    image: bool = False  # a uint8 Box in [0, 255] (see is_image_space)
    categories: int | None = None  # a Discrete(n) part: n (its shape is ())

    @property
    def name(self) -> str:
        """The part's keys joined with dots: ``"image"``, ``"robot.position"``, ``"0"``."""
        return ".".join(str(key) for key in self.path)

    @property
    def size(self) -> int:
        """Entries the part takes in a flattened observation."""
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Observation shape and dtype, the action spec and the episode time limit of an env.

    A Dict or Tuple observation space is served flattened: each observation is one vector
    [observation_shape] of its ``observation_parts`` laid one after another (``flatten_
    observation``), so the sources, replays, datasets and checkpoints keep one array a step,
    and the networks encode each part by itself (an embedding for a Discrete part, the conv
    torso for images) before joining them."""

    observation_shape: tuple[int, ...]
    observation_dtype: Any
    action: ActionSpec
    max_episode_steps: int | None = None
    observation_categories: int | None = None  # Discrete(n) observations: n; None for a Box
    # whether time steps carry the legal actions (TimeStep.action_mask, shaped like the
    # discrete head's logits: [n], or [k, n] for k controls)
    action_mask: bool = False
    observation_parts: tuple[ObservationPart, ...] = ()  # of a Dict/Tuple space; () for arrays

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
    """The array shape of a Box (or Discrete, as a scalar) observation space; of a Dict or
    Tuple space, the flattened vector of its parts (``observation_parts_from_space``)."""
    if is_composite_space(space):
        return (sum(part.size for part in observation_parts_from_space(space)),)
    if hasattr(space, "low") and hasattr(space, "shape") and space.shape is not None:
        return tuple(int(d) for d in space.shape)
    if _discrete_n(space) is not None:
        return ()
    raise SpaceError(
        f"unsupported observation space {_space_name(space)} ({space!r}): heron agents take "
        "Box or Discrete observations, or Dict and Tuple spaces of them"
    )


def is_composite_space(space) -> bool:
    """A Dict (``spaces`` a mapping) or Tuple (``spaces`` a sequence) space, of Gymnasium or
    gymnax."""
    return _space_name(space) in ("Dict", "Tuple") and hasattr(space, "spaces")


def observation_parts_from_space(space, path: tuple = ()) -> tuple[ObservationPart, ...]:
    """The leaves of a Dict or Tuple observation space (nested ones too), in the space's own
    order (Gymnasium sorts a Dict's keys); () for a Box or Discrete space. Raises SpaceError
    for a leaf that is not a Box, MultiBinary or Discrete, naming it."""
    if not is_composite_space(space):
        if not path:
            return ()
        shape = tuple(int(d) for d in getattr(space, "shape", None) or ())
        if _space_name(space) == "MultiBinary":  # its n is its shape, not categories
            return (ObservationPart(path, shape),)
        if _discrete_n(space) is not None:
            return (ObservationPart(path, (), categories=_discrete_n(space)),)
        if hasattr(space, "low") and hasattr(space, "shape") and not hasattr(space, "nvec"):
            return (ObservationPart(path, shape, image=is_image_space(space)),)
        name = ".".join(str(key) for key in path)
        raise SpaceError(
            f"unsupported part {name!r} of the observation space: {space!r}; the parts of a "
            "Dict or Tuple observation space may be Box, MultiBinary or Discrete spaces"
        )
    children = space.spaces
    items = children.items() if hasattr(children, "items") else enumerate(children)
    parts = tuple(part for key, child in items for part in observation_parts_from_space(
        child, (*path, key)
    ))  # fmt: skip
    if not parts:
        raise SpaceError(f"the observation space {space!r} has no parts")
    return parts


def normalized_entries(parts) -> np.ndarray | None:
    """Which entries [D] of flattened observations an observation normaliser may rescale:
    those of vector parts, not of images (scaled to [0, 1] in the network) nor of Discrete
    parts (the categories an embedding reads). None for array observations: every entry."""
    if not parts:
        return None
    return np.concatenate(
        [np.full(part.size, not part.image and part.categories is None) for part in parts]
    )


def _leaf(observation, part: ObservationPart):
    try:
        for key in part.path:
            observation = observation[key]
    except (KeyError, IndexError, TypeError):
        raise SpaceError(
            f"the observation has no part {part.name!r}, which its Dict/Tuple space has"
        ) from None
    return observation


def observation_batch_ndim(parts, observation) -> int:
    """How many batch axes lead the parts of a Dict/Tuple ``observation``."""
    first = parts[0]
    return np.ndim(_leaf(observation, first)) - len(first.shape)


def flatten_observation(parts, observation, batch_ndim: int, dtype, xp=np):
    """A Dict/Tuple observation (nested dicts and tuples of arrays [*batch, *part.shape]) ->
    one array [*batch, sum of the parts' sizes] of ``dtype``, the parts in ``parts``' order.
    ``xp`` is numpy (host environments) or jax.numpy (compiled ones)."""
    leaves = []
    for part in parts:
        leaf = xp.asarray(_leaf(observation, part))
        batch = leaf.shape[:batch_ndim]
        if leaf.shape[batch_ndim:] != part.shape:
            raise SpaceError(
                f"observation part {part.name!r} has shape {leaf.shape[batch_ndim:]}, its "
                f"space says {part.shape}"
            )
        leaves.append(leaf.reshape(batch + (part.size,)).astype(dtype))
    return xp.concatenate(leaves, axis=-1)


def unflatten_observation(parts, flat: np.ndarray) -> dict | tuple:
    """The inverse of ``flatten_observation`` for arrays [..., D]: nested dicts (and tuples,
    where the space had Tuples) of arrays [..., *part.shape]; uint8 image parts and integer
    Discrete parts get their own dtypes back."""
    flat = np.asarray(flat)
    batch, offset, leaves = flat.shape[:-1], 0, []
    for part in parts:
        leaf = flat[..., offset : offset + part.size].reshape(batch + part.shape)
        offset += part.size
        if part.image:
            leaf = leaf.astype(np.uint8)
        elif part.categories is not None:
            leaf = leaf.astype(np.int64)
        leaves.append(leaf)
    return nest(parts, leaves)


def nest(parts, leaves, as_dict=dict, as_tuple=tuple):
    """One leaf per part, nested as the parts' paths say: ``as_dict({key: child})`` where a
    path has keys, ``as_tuple([child, ...])`` where it has indices (plain dicts and tuples
    by default; Gymnasium's Dict and Tuple to rebuild a space)."""
    tree: dict = {}
    for part, leaf in zip(parts, leaves, strict=True):
        node = tree
        for key in part.path[:-1]:
            node = node.setdefault(key, {})
        node[part.path[-1]] = leaf

    def build(node):
        if not isinstance(node, dict):
            return node
        if all(isinstance(key, int) for key in node):
            return as_tuple([build(node[index]) for index in range(len(node))])
        return as_dict({key: build(child) for key, child in node.items()})

    return build(tree)


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
    float32's memory in replays; networks scale them to [0, 1]), float32 otherwise. A Dict
    or Tuple space's flattened observations are uint8 where every part is an image."""
    if is_composite_space(space):
        parts = observation_parts_from_space(space)
        return np.uint8 if all(part.image for part in parts) else np.float32
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
