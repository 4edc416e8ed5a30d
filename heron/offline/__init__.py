"""Offline RL: Minari datasets on local disk, collection from trained policies, and a
dataset as a source of experience (the environment only evaluates).

    from heron.offline import read_dataset, write_dataset, to_steps
    dataset = read_dataset("data/pendulum-medium")
    steps = to_steps(dataset.episodes, np.float32)   # heron steps [N], FIRST .. LAST
"""

from heron.offline.collect import CollectError, collect_episodes
from heron.offline.dataset import (
    Dataset,
    DatasetError,
    Episode,
    check_against_env,
    episodes_from_steps,
    gym_spaces,
    read_dataset,
    to_steps,
    write_dataset,
)
from heron.offline.source import DatasetSource

__all__ = [
    "CollectError",
    "Dataset",
    "DatasetError",
    "DatasetSource",
    "Episode",
    "check_against_env",
    "collect_episodes",
    "episodes_from_steps",
    "gym_spaces",
    "read_dataset",
    "to_steps",
    "write_dataset",
]
