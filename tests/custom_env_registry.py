"""A user's module that registers environment ids when imported (``--env-module``)."""

from __future__ import annotations

import gymnasium
from custom_envs import LIMIT, counter_pair

from heron import envs

gymnasium.register("HeronTiny-v0", entry_point="custom_envs:TinyEnv", max_episode_steps=LIMIT)
envs.register("Counter-v0", counter_pair)
