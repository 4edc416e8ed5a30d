"""Gymnasium environments with Dict observations (tests use them by module path, e.g.
``dict_envs:GymDictCue``), plus broken ones for ``heron check-env``.

GymDictCue is ``heron:DictCue-v0``'s game on the host: the action (cue + the lit pixel's
column + [sign > 0]) mod 3 earns 1; 10 steps an episode. DictTarget has Box actions: the
action earns -|action - (target if flag else -target)|; 10 steps an episode.
"""

from __future__ import annotations

import gymnasium
import numpy as np

CUE_SPACE = gymnasium.spaces.Dict(
    {
        "cue": gymnasium.spaces.Discrete(3),
        "picture": gymnasium.spaces.Box(0, 255, (3, 3, 1), np.uint8),
        "sign": gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32),
    }
)


def cue_answer(observation) -> int:
    column = int(np.argmax(np.asarray(observation["picture"]).reshape(9))) % 3
    return (int(observation["cue"]) + column + int(observation["sign"][0] > 0)) % 3


class GymDictCue(gymnasium.Env):
    observation_space = CUE_SPACE
    action_space = gymnasium.spaces.Discrete(3)

    def _draw(self):
        rng = self.np_random
        picture = np.zeros(9, np.uint8)
        picture[rng.integers(9)] = 255
        self._observation = {
            "cue": int(rng.integers(3)),
            "picture": picture.reshape(3, 3, 1),
            "sign": rng.uniform(-1.0, 1.0, 1).astype(np.float32),
        }
        return self._observation

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(int(action) == cue_answer(self._observation))
        self._t += 1
        return self._draw(), reward, False, self._t >= 10, {}


class DictTarget(gymnasium.Env):
    observation_space = gymnasium.spaces.Dict(
        {
            "flag": gymnasium.spaces.Discrete(2),
            "target": gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32),
        }
    )
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _draw(self):
        self._flag = int(self.np_random.integers(2))
        self._target = self.np_random.uniform(-1.0, 1.0, 1).astype(np.float32)
        return {"flag": self._flag, "target": self._target}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action):
        wanted = self._target[0] if self._flag else -self._target[0]
        reward = -abs(float(np.asarray(action).reshape(-1)[0]) - wanted)
        self._t += 1
        return self._draw(), reward, False, self._t >= 10, {}


class MissingPartEnv(GymDictCue):
    """Its observations lack the part ``sign``."""

    def _draw(self):
        observation = dict(super()._draw())
        del observation["sign"]
        return observation


class WrongPartShapeEnv(GymDictCue):
    """Its ``picture`` is 3x3 without the channel axis its space has."""

    def _draw(self):
        observation = dict(super()._draw())
        observation["picture"] = observation["picture"][..., 0]
        return observation


class TextPartEnv(GymDictCue):
    """A Dict observation with a part heron cannot encode (Text)."""

    observation_space = gymnasium.spaces.Dict(
        {"cue": gymnasium.spaces.Discrete(3), "mission": gymnasium.spaces.Text(8)}
    )

    def _draw(self):
        return {"cue": 0, "mission": "go"}

    def step(self, action):
        self._t += 1
        return self._draw(), 0.0, False, self._t >= 10, {}
