"""Minari datasets on local disk: write, read, check against an environment, and convert.

A Minari episode of T transitions holds observations [T+1, ...], actions [T, ...], rewards,
terminations and truncations [T], and optional infos. heron keeps behaviour extras (e.g.
``log_prob``) as infos aligned with the observations, [T+1, ...]: entry k describes the
action taken at observation k (the last one's action was never executed).

The same episode is T+1 heron steps (see ``heron/types.py``): step 0 is FIRST (obs_0,
reward 0, discount 1, action a_0); step k is (obs_k, reward r_{k-1}, action a_k); the last
is LAST with discount 0 when the episode terminated, 1 when it was truncated, and a
placeholder action (zeros). ``to_steps`` lays episodes one after another without a Python
loop over steps.

Datasets live where the user says: ``write_dataset(path, ...)`` and ``read_dataset(path)``
use Minari's storage classes directly on that directory, never its dataset root or hub.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium
import numpy as np

from heron.specs import (
    EnvSpec,
    SpaceError,
    flatten_observation,
    nest,
    observation_dtype_from_space,
    observation_parts_from_space,
    observation_shape_from_space,
    unflatten_observation,
)
from heron.types import Experience, StepType

DATA_FORMAT = "hdf5"
FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


class DatasetError(ValueError):
    """A dataset that is missing, malformed, or does not fit the environment."""


class Episode(NamedTuple):
    """One episode of T transitions, Minari's layout."""

    observations: np.ndarray  # [T+1, *obs] (a Dict or Tuple observation flattened)
    actions: np.ndarray  # [T, *action]
    rewards: np.ndarray  # [T]
    terminations: np.ndarray  # bool [T]: only the last may be true
    truncations: np.ndarray  # bool [T]
    extras: dict[str, np.ndarray] = {}  # name -> [T+1, ...], aligned with observations

    @property
    def num_steps(self) -> int:
        return int(len(self.rewards))


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Episodes read from (or about to be written to) a dataset directory."""

    episodes: list[Episode]
    observation_space: gymnasium.Space
    action_space: gymnasium.Space
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    @property
    def num_steps(self) -> int:
        """Transitions (environment steps) over all episodes."""
        return int(sum(e.num_steps for e in self.episodes))

    @property
    def returns(self) -> np.ndarray:
        """Undiscounted return of every episode, float64 [num_episodes]."""
        return np.array([np.sum(e.rewards, dtype=np.float64) for e in self.episodes])

    def summary(self) -> dict[str, Any]:
        returns = self.returns
        return {
            "episodes": self.num_episodes,
            "steps": self.num_steps,
            "return_mean": float(returns.mean()) if returns.size else None,
            "return_std": float(returns.std()) if returns.size else None,
        }


# --------------------------------------------------------------------------- spaces


def gym_spaces(spec: EnvSpec) -> tuple[gymnasium.Space, gymnasium.Space]:
    """Gymnasium (observation, action) spaces describing what a heron env produces and takes:
    observations of the env's shape (uint8 images in [0, 255], float32 otherwise; a Dict or
    Tuple of its parts where the env's observations have parts), and Discrete /
    MultiDiscrete / Box actions."""
    if spec.observation_parts:
        observation_space = space_of_parts(spec.observation_parts)
    elif np.dtype(spec.observation_dtype) == np.uint8:
        observation_space = gymnasium.spaces.Box(0, 255, spec.observation_shape, np.uint8)
    else:
        observation_space = gymnasium.spaces.Box(
            -np.inf, np.inf, spec.observation_shape, np.float32
        )
    action = spec.action
    if action.is_discrete and action.multi_control:
        action_space = gymnasium.spaces.MultiDiscrete([action.n_actions] * action.n_controls)
    elif action.is_discrete:
        action_space = gymnasium.spaces.Discrete(action.n_actions)
    else:
        low, high = action.bounds
        action_space = gymnasium.spaces.Box(
            low.astype(np.float32), high.astype(np.float32), action.shape, np.float32
        )
    return observation_space, action_space


def space_of_parts(parts) -> gymnasium.Space:
    """The Gymnasium Dict (or Tuple) space of observations with ``parts``: uint8 Boxes in
    [0, 255] for images, Discrete spaces for categories, unbounded float32 Boxes for the
    rest."""

    def leaf(part):
        if part.image:
            return gymnasium.spaces.Box(0, 255, part.shape, np.uint8)
        if part.categories is not None:
            return gymnasium.spaces.Discrete(part.categories)
        return gymnasium.spaces.Box(-np.inf, np.inf, part.shape, np.float32)

    leaves = [leaf(part) for part in parts]
    return nest(parts, leaves, gymnasium.spaces.Dict, gymnasium.spaces.Tuple)


def _describe_actions(spec: EnvSpec) -> str:
    action = spec.action
    if action.is_discrete:
        shape = f" of shape {action.action_shape}" if action.multi_control else ""
        return f"discrete actions{shape} (integers in [0, {action.n_actions}))"
    return f"continuous actions of shape {action.shape} in [{action.low}, {action.high}]"


def check_spaces(dataset: Dataset, spec: EnvSpec, env_id: str) -> None:
    """DatasetError unless the dataset's declared spaces are the environment's."""
    parts = _parts(dataset.observation_space)
    if [(p.name, p.shape) for p in parts] != [(p.name, p.shape) for p in spec.observation_parts]:
        raise DatasetError(
            f"dataset observation space {dataset.observation_space} has the parts "
            f"{_describe_parts(parts)}; {env_id} observations have the parts "
            f"{_describe_parts(spec.observation_parts)}"
        )
    obs_shape = tuple(observation_shape_from_space(dataset.observation_space))
    if obs_shape != tuple(spec.observation_shape):
        raise DatasetError(
            f"dataset observation space has shape {obs_shape}; {env_id} observations have "
            f"shape {tuple(spec.observation_shape)}"
        )
    space, action = dataset.action_space, spec.action
    if action.is_discrete:
        if isinstance(space, gymnasium.spaces.Discrete):
            fits = not action.multi_control and int(space.n) == action.n_actions
        elif isinstance(space, gymnasium.spaces.MultiDiscrete):
            nvec = np.asarray(space.nvec).reshape(-1)
            fits = (
                action.multi_control
                and len(nvec) == action.n_controls
                and bool(np.all(nvec == action.n_actions))
            )
        else:
            fits = False
    else:
        fits = (
            isinstance(space, gymnasium.spaces.Box)
            and tuple(space.shape) == tuple(action.shape)
            and np.allclose(space.low, action.bounds[0])
            and np.allclose(space.high, action.bounds[1])
        )
    if not fits:
        raise DatasetError(
            f"dataset action space {space} does not match {env_id}, which takes "
            f"{_describe_actions(spec)}"
        )


def _parts(space) -> tuple:
    try:
        return observation_parts_from_space(space)
    except SpaceError as error:
        raise DatasetError(f"dataset observation space: {error}") from error


def _describe_parts(parts) -> str:
    if not parts:
        return "none (one array)"
    return ", ".join(f"{part.name} {part.shape}" for part in parts)


# --------------------------------------------------------------------------- write / read


def _dataset_id(path: pathlib.Path) -> str:
    """A Minari id, ``heron/<name>-v0``, from the directory's name."""
    name = re.sub(r"[^-_\w]+", "_", path.resolve().name).strip("-_") or "dataset"
    name = re.sub(r"-v\d+$", "", name)
    return f"heron/{name}-v0"


def check_writable(path: str | os.PathLike) -> pathlib.Path:
    """The absolute dataset directory ``path``, or DatasetError when a dataset cannot be written
    there: it already holds one, it is a file, or its nearest existing parent is not a writable
    directory. Cheap: call it before spending time on rollouts."""
    from minari.dataset.minari_storage import METADATA_FILE_NAME

    target = pathlib.Path(os.path.abspath(path))
    metadata = target / METADATA_FILE_NAME
    if metadata.exists():
        try:
            episodes = json.loads(metadata.read_text()).get("total_episodes")
        except (OSError, ValueError, AttributeError):
            episodes = None
        leftover = " (an empty one, left by a failed write: remove it)" if episodes == 0 else ""
        raise DatasetError(f"{str(path)!r} already holds a dataset{leftover}; choose another path")
    if target.exists() and not target.is_dir():
        raise DatasetError(f"{str(path)!r} exists and is not a directory")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise DatasetError(f"cannot write {str(path)!r}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatasetError(f"cannot write {str(path)!r}: {str(parent)!r} is not writable")
    return target


def write_dataset(
    path: str | os.PathLike,
    episodes: Sequence[Episode],
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Writes ``episodes`` as a Minari (HDF5) dataset in the directory ``path``.

    ``path`` (relative or absolute) must not hold a dataset already. ``metadata`` (JSON
    values) is stored beside Minari's own keys. Arrays are stored as given: reading them
    back is exact. The dataset is written to a temporary directory beside ``path`` and moved
    into place at the end, so a failed write leaves nothing behind.
    """
    target = check_writable(path)
    if not episodes:
        raise DatasetError("refusing to write an empty dataset: no episodes")
    for index, episode in enumerate(episodes):
        _check_episode(episode, index)
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_free_space(target, episodes)
    staging = pathlib.Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    )
    staging.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would hide the dataset from others
    try:
        _write_minari(staging, target, episodes, observation_space, action_space, metadata)
        _move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def estimated_size(episodes: Sequence[Episode]) -> int:
    """Bytes a dataset of ``episodes`` takes on disk, over-estimated: its arrays plus about
    4 KB of HDF5 structure per array (measured: 2.2 MB for 100 CartPole episodes of 256 KB
    of arrays; this says 5.0 MB)."""
    arrays = sum(len(FIELDS) + len(e.extras) + 2 for e in episodes)  # + the episode groups
    data = sum(np.asarray(a).nbytes for e in episodes for a in (*e[:5], *e.extras.values()))
    return int(1.1 * data) + 4096 * arrays + (1 << 20)


def _check_free_space(target: pathlib.Path, episodes: Sequence[Episode]) -> None:
    """OSError (ENOSPC) when the disk cannot hold the dataset: HDF5 crashes the process
    (a segmentation fault) when it runs out of space mid-write."""
    needed = estimated_size(episodes)
    free = shutil.disk_usage(target.parent).free
    if free < needed:
        raise OSError(
            errno.ENOSPC,
            f"No space left on device: the dataset needs about {needed / 1e6:.1f} MB, "
            f"{free / 1e6:.1f} MB are free",
            str(target),
        )


def _write_minari(staging, target, episodes, observation_space, action_space, metadata) -> None:
    from minari import __version__ as minari_version
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.new(
        staging,
        observation_space=observation_space,
        action_space=action_space,
        data_format=DATA_FORMAT,
        jpeg_encoding=False,  # lossless: a round trip is exact
    )
    parts = _parts(observation_space)
    storage.update_episodes(
        EpisodeBuffer(
            observations=(
                unflatten_observation(parts, e.observations)
                if parts
                else np.asarray(e.observations)
            ),
            actions=np.asarray(e.actions),
            rewards=np.asarray(e.rewards),
            terminations=np.asarray(e.terminations),
            truncations=np.asarray(e.truncations),
            infos={k: np.asarray(v) for k, v in e.extras.items()} or None,
        )
        for e in episodes
    )
    storage.update_metadata(
        {
            "dataset_id": _dataset_id(target),
            "minari_version": minari_version,
            "heron_extras": sorted(episodes[0].extras),
            **(metadata or {}),
        }
    )


def _move_into_place(staging: pathlib.Path, target: pathlib.Path) -> None:
    """Moves the finished dataset from ``staging`` to ``target``: one rename when ``target``
    is new or an empty directory; otherwise file by file, metadata last (a directory without
    metadata.json holds no dataset), undone on failure."""
    from minari.dataset.minari_storage import METADATA_FILE_NAME

    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(staging, target)
        return
    names = sorted(os.listdir(staging), key=lambda name: name == METADATA_FILE_NAME)
    moved = []
    try:
        for name in names:
            os.replace(staging / name, target / name)
            moved.append(target / name)
    except BaseException:
        for done in moved:
            done.unlink(missing_ok=True)
        raise


def content_hash(dataset: Dataset) -> str:
    """SHA-256 (hex) of every episode's observations, actions, rewards, terminations,
    truncations and infos (extras, by name), in episode order.

    Each array enters with its field name, dtype and shape, then its raw bytes, so equal
    hashes mean equal arrays (same values, dtypes, shapes and episode boundaries). One pass
    over the bytes: about a second per GB.
    """
    digest = hashlib.sha256()
    for episode in dataset.episodes:
        arrays = list(zip(FIELDS, episode[:5], strict=True))
        arrays += [(f"infos/{k}", episode.extras[k]) for k in sorted(episode.extras)]
        for name, array in arrays:
            array = np.ascontiguousarray(array)
            digest.update(f"{name}|{array.dtype.str}|{array.shape};".encode())
            digest.update(memoryview(array.reshape(-1).view(np.uint8)))
    return digest.hexdigest()


_MISSING = re.compile(r"object '([^']+)' doesn't exist")


def _check_is_dataset(path: pathlib.Path) -> None:
    from minari.dataset.minari_storage import METADATA_FILE_NAME

    if not path.is_dir():
        raise DatasetError(f"dataset {str(path)!r} does not exist")
    if not path.joinpath(METADATA_FILE_NAME).is_file():
        raise DatasetError(f"{str(path)!r} is not a Minari dataset: it has no {METADATA_FILE_NAME}")


def recorded_env(path: str | os.PathLike) -> str | None:
    """The heron env id the dataset in ``path`` was collected in (``heron collect`` records
    it as ``heron_env``), or None where the dataset does not say (another writer's).
    DatasetError if ``path`` holds no readable dataset."""
    from minari.dataset.minari_storage import MinariStorage

    path = pathlib.Path(path)
    _check_is_dataset(path)
    try:
        env = MinariStorage.read_raw_metadata(path).get("heron_env")
    except (ValueError, OSError) as error:
        raise DatasetError(f"dataset {str(path)!r} cannot be read: {error}") from error
    return env if isinstance(env, str) and env else None


def read_dataset(path: str | os.PathLike) -> Dataset:
    """Reads every episode of the Minari dataset in directory ``path`` (any storage format).

    Extras are the infos listed in the metadata's ``heron_extras`` when heron wrote the
    dataset, otherwise every numeric info with one entry per observation. Raises
    DatasetError naming the problem: no dataset there, a missing field, inconsistent
    lengths, NaNs, no episodes.
    """
    from minari.dataset.minari_storage import MinariStorage

    path = pathlib.Path(path)
    _check_is_dataset(path)
    try:
        metadata = MinariStorage.read_raw_metadata(path)
        if not metadata.get("total_episodes"):
            raise DatasetError(f"dataset {str(path)!r} is empty: it has no episodes")
        storage = MinariStorage.read(path)
        raw = list(storage.get_episodes(range(storage.total_episodes)))
    except KeyError as error:
        found = _MISSING.search(str(error))
        field = found.group(1) if found else str(error)
        raise DatasetError(f"dataset {str(path)!r} is missing the field {field!r}") from error
    except DatasetError:
        raise
    except (ValueError, OSError) as error:
        raise DatasetError(f"dataset {str(path)!r} cannot be read: {error}") from error
    if not raw:
        raise DatasetError(f"dataset {str(path)!r} is empty: it has no episodes")
    extras_names = metadata.get("heron_extras")
    parts = _parts(storage.observation_space)
    dtype = observation_dtype_from_space(storage.observation_space) if parts else None
    episodes = [_episode_from_minari(r, extras_names, parts, dtype) for r in raw]
    for index, episode in enumerate(episodes):
        _check_episode(episode, index)
    return Dataset(episodes, storage.observation_space, storage.action_space, metadata)


def _episode_from_minari(raw: dict, extras_names, parts, dtype) -> Episode:
    """An Episode of heron's arrays: Dict or Tuple observations (``parts``) flattened to
    ``dtype``."""
    if parts:
        try:
            raw = {**raw, "observations": flatten_observation(
                parts, raw.get("observations"), 1, dtype
            )}  # fmt: skip
        except (SpaceError, ValueError) as error:
            raise DatasetError(f"episode {raw.get('id')}: observations: {error}") from error
    for field in FIELDS:
        if not isinstance(raw.get(field), np.ndarray):
            raise DatasetError(
                f"episode {raw.get('id')}: field {field!r} is missing or not one array"
            )
    infos = raw.get("infos") or {}
    length = len(raw["observations"])
    if extras_names is None:  # not written by heron: numeric per-observation infos
        extras_names = [
            k
            for k, v in infos.items()
            if isinstance(v, np.ndarray)
            and v.ndim >= 1
            and len(v) == length
            and (np.issubdtype(v.dtype, np.number) or v.dtype == bool)
        ]
    missing = [k for k in extras_names if k not in infos]
    if missing:
        raise DatasetError(f"episode {raw.get('id')}: infos lack the extra {missing[0]!r}")
    return Episode(*(raw[f] for f in FIELDS), {k: np.asarray(infos[k]) for k in extras_names})


def _check_episode(episode: Episode, index: int) -> None:
    """Lengths, finiteness and where terminations may be; DatasetError names the field."""
    where = f"episode {index}"
    steps = len(episode.rewards)
    if steps == 0:
        raise DatasetError(f"{where} is empty: it has no transitions")
    expected = {
        "observations": steps + 1,
        "actions": steps,
        "rewards": steps,
        "terminations": steps,
        "truncations": steps,
        **{f"infos/{k}": steps + 1 for k in episode.extras},
    }
    arrays = dict(zip(FIELDS, episode[:5], strict=True))
    arrays.update({f"infos/{k}": v for k, v in episode.extras.items()})
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.ndim == 0 or len(array) != expected[name]:
            raise DatasetError(
                f"{where}: field {name!r} has {len(array) if array.ndim else 0} entries, "
                f"expected {expected[name]} ({steps} transitions)"
            )
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise DatasetError(f"{where}: field {name!r} has non-numeric dtype {array.dtype}")
        if np.issubdtype(array.dtype, np.inexact) and not np.all(np.isfinite(array)):
            bad = np.argwhere(~np.isfinite(array))[0]
            raise DatasetError(
                f"{where}: field {name!r} has a non-finite value "
                f"({array[tuple(bad)]}) at index {tuple(int(i) for i in bad)}"
            )
    for name in ("rewards", "terminations", "truncations"):
        if np.asarray(arrays[name]).ndim != 1:
            raise DatasetError(
                f"{where}: field {name!r} must be one value per step, got shape "
                f"{np.shape(arrays[name])}"
            )
    if np.any(np.asarray(episode.terminations[:-1], bool)):
        step = int(np.argmax(np.asarray(episode.terminations[:-1], bool)))
        raise DatasetError(
            f"{where}: field 'terminations' is true at step {step}, before the episode's "
            f"last step {steps - 1}"
        )


def check_against_env(dataset: Dataset, spec: EnvSpec, env_id: str) -> None:
    """DatasetError unless every episode's arrays fit the environment's spaces: observation
    shapes, action dtypes (integers for discrete, floats for continuous), shapes and range."""
    check_spaces(dataset, spec, env_id)
    action = spec.action
    obs_shape = tuple(spec.observation_shape)
    for index, episode in enumerate(dataset.episodes):
        where = f"episode {index}"
        if episode.observations.shape[1:] != obs_shape:
            raise DatasetError(
                f"{where}: field 'observations' has per-step shape "
                f"{episode.observations.shape[1:]}; {env_id} observations have shape {obs_shape}"
            )
        actions = episode.actions
        if actions.shape[1:] != tuple(action.action_shape):
            raise DatasetError(
                f"{where}: field 'actions' has per-step shape {actions.shape[1:]}; {env_id} "
                f"takes {_describe_actions(spec)}"
            )
        if action.is_discrete:
            if not np.issubdtype(actions.dtype, np.integer):
                raise DatasetError(
                    f"{where}: field 'actions' has dtype {actions.dtype}; {env_id} takes "
                    f"{_describe_actions(spec)}"
                )
            low, high = 0, action.n_actions - 1
        else:
            if not np.issubdtype(actions.dtype, np.floating):
                raise DatasetError(
                    f"{where}: field 'actions' has dtype {actions.dtype}; {env_id} takes "
                    f"{_describe_actions(spec)}"
                )
            low, high = action.bounds
        if np.any(actions < low) or np.any(actions > high):
            raise DatasetError(
                f"{where}: field 'actions' has values outside the action space "
                f"(min {actions.min()}, max {actions.max()}); {env_id} takes "
                f"{_describe_actions(spec)}"
            )


# --------------------------------------------------------------------------- heron steps


def to_steps(episodes: Sequence[Episode], action_dtype) -> Experience:
    """Episodes laid one after another as heron steps, leaves [N, ...] with N = sum(T + 1).

    Concatenates per field and inserts the FIRST rewards and LAST placeholder actions
    with ``np.insert``: no loop over steps.
    """
    lengths = np.array([e.num_steps for e in episodes], np.int64)  # T_i
    starts = np.concatenate([[0], np.cumsum(lengths[:-1] + 1)])  # FIRST step index
    ends = starts + lengths  # LAST step index
    total = int(np.sum(lengths + 1))
    action_starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]  # a_0 of each episode

    actions = np.concatenate([e.actions for e in episodes]).astype(action_dtype)
    action = np.insert(actions, action_starts + lengths, 0, axis=0)
    rewards = np.concatenate([e.rewards for e in episodes]).astype(np.float32)
    reward = np.insert(rewards, action_starts, 0.0)
    step_type = np.full(total, StepType.MID, np.int32)
    step_type[starts] = StepType.FIRST
    step_type[ends] = StepType.LAST
    discount = np.ones(total, np.float32)
    terminated = np.array([bool(e.terminations[-1]) for e in episodes])
    discount[ends[terminated]] = 0.0
    names = list(episodes[0].extras)
    for index, episode in enumerate(episodes):
        if list(episode.extras) != names:
            raise DatasetError(
                f"episode {index} has extras {sorted(episode.extras)}, episode 0 has "
                f"{sorted(names)}: every episode must carry the same extras"
            )
    extras = {k: np.concatenate([e.extras[k] for e in episodes]) for k in names}
    return Experience(
        step_type=step_type,
        reward=reward,
        discount=discount,
        observation=np.concatenate([e.observations for e in episodes]),
        action=action,
        extras=extras,
    )


def episodes_from_steps(steps: Experience) -> list[Episode]:
    """The inverse of ``to_steps`` for steps [N] that hold whole episodes (FIRST .. LAST):
    LAST steps with discount 1 are truncations, with discount 0 terminations."""
    step_type = np.asarray(steps.step_type)
    starts = np.flatnonzero(step_type == StepType.FIRST)
    ends = np.flatnonzero(step_type == StepType.LAST)
    if len(starts) != len(ends) or np.any(ends <= starts):
        raise DatasetError("steps do not hold whole episodes (FIRST ... LAST)")
    episodes = []
    extras = steps.extras if isinstance(steps.extras, dict) else {}
    for start, end in zip(starts, ends, strict=True):
        length = end - start
        terminated = bool(np.asarray(steps.discount)[end] == 0.0)
        terminations = np.zeros(length, bool)
        truncations = np.zeros(length, bool)
        terminations[-1] = terminated
        truncations[-1] = not terminated
        episodes.append(
            Episode(
                observations=np.asarray(steps.observation[start : end + 1]),
                actions=np.asarray(steps.action[start:end]),
                rewards=np.asarray(steps.reward[start + 1 : end + 1]),
                terminations=terminations,
                truncations=truncations,
                extras={k: np.asarray(v[start : end + 1]) for k, v in extras.items()},
            )
        )
    return episodes
