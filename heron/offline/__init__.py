"""Offline RL: Minari datasets on local disk, collection from trained policies, and
training from data (the environment only evaluates).

    from heron.offline import read_dataset, write_dataset, collect
    dataset = read_dataset("data/pendulum-medium")
    steps = to_steps(dataset.episodes, np.float32)   # heron steps [N], FIRST .. LAST
"""

from heron.offline.collect import CollectError, collect
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
from heron.offline.training import OfflineData, load_offline_data, make_offline_program

__all__ = [
    "CollectError",
    "Dataset",
    "DatasetError",
    "Episode",
    "OfflineData",
    "check_against_env",
    "collect",
    "episodes_from_steps",
    "gym_spaces",
    "load_offline_data",
    "make_offline_program",
    "read_dataset",
    "to_steps",
    "write_dataset",
]
