"""``ale:<game>-v5``: Atari 2600 games through ale-py's C++ vector environment
(``AtariVectorEnv``: frame skipping with max-pooling, 84x84 grey frames, no-op starts, FIRE
at game starts), stepped on the host, its frames kept as uint8 [84, 84, 1]. Stack them with
``len_history_for_policy`` (the presets stack 4) and read them with an image torso
(``network.torso nature_cnn`` or ``impala``). The options (``RunConfig.atari``) are those of
SB3's ``AtariWrapper``; its reward clipping is heron's ``clip_rewards``, applied to what the
learner sees, so that returns are reported unclipped.

With ``atari.episodic_life`` a lost life ends bootstrapping (the step's discount is 0, as
SB3's ``EpisodicLifeEnv`` ends its episode there) while the game goes on: episodes are whole
games, so training and evaluation returns are full games' scores. With ``atari.fire_reset``
too, the action after a lost life is FIRE, whatever the agent chose (SB3's
``FireResetEnv`` presses it in the reset that its ``EpisodicLifeEnv`` makes there): a greedy
policy that never fires cannot stall a game of Breakout until its time limit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from heron.configs import integer, number
from heron.envs.family import Family, find_in
from heron.envs.gym_env import GymEnv


@dataclasses.dataclass(frozen=True)
class AtariConfig:
    """Options of the ``ale:`` environments (SB3's ``AtariWrapper``; Gymnasium's v5
    defaults for the rest)."""

    noop_max: int = integer(30, 0)
    """At each game's start, a random number of no-op actions up to this many."""
    frame_skip: int = integer(4, 1)
    """Frames each action is repeated for (the observation: the max of the last two)."""
    screen_size: int = integer(84, 8)
    """Side of the square grey frames."""
    episodic_life: bool = True
    """A lost life ends bootstrapping (discount 0), not the episode (see the module)."""
    fire_reset: bool = True
    """Press FIRE at each game's start, in games that have it; with episodic_life, also
    after each lost life (see the module)."""
    repeat_action_probability: float = number(0.25, 0.0, 1.0)
    """Sticky actions: the chance that the previous action repeats instead (v5: 0.25)."""
    max_episode_frames: int = integer(108_000, 1)
    """Frames before a game is truncated (v5: 108,000, i.e. 27,000 steps at frame_skip 4)."""


def _registry_ids() -> dict[str, str]:
    """{'Breakout-v5': 'breakout', ...}: ale-py's v5 games (its ROMs ship with it)."""
    import ale_py  # noqa: F401  (registers the ALE/ ids with gymnasium)
    import gymnasium

    return {
        env_id.removeprefix("ALE/"): spec.kwargs["game"]
        for env_id, spec in gymnasium.registry.items()
        if env_id.startswith("ALE/") and env_id.endswith("-v5") and "game" in spec.kwargs
    }


def _ids() -> list[str]:
    return sorted(_registry_ids())


class AtariEnv(GymEnv):
    """A GymEnv of ale-py's vector env that turns lost lives into discounts of 0 (with
    ``episodic_life``; each step's lives are compared with the step before's) and, with
    ``fire_reset`` too, plays FIRE as the action after a lost life."""

    def __init__(self, make_vector_env, num_envs, name, max_episode_steps, options):
        self._options = options
        self._lives = np.zeros(num_envs, np.int64)
        self._fire_next = np.zeros(num_envs, bool)
        super().__init__(make_vector_env, num_envs, name, max_episode_steps)
        from ale_py import Action

        action_set = list(self._env.unwrapped.ale.get_action_set())
        self._fire = action_set.index(Action.FIRE) if Action.FIRE in action_set else None

    def with_num_envs(self, num_envs: int) -> AtariEnv:
        return AtariEnv(
            self._make_vector_env, num_envs, self.name, self.spec.max_episode_steps, self._options
        )

    def _reset_info(self, info) -> None:
        self._lives = np.asarray(info["lives"]).copy()
        self._fire_next[:] = False

    def _bootstrap_ends(self, info) -> np.ndarray:
        lives = np.asarray(info["lives"])
        lost = lives < self._lives
        self._lives = lives.copy()
        ends = lost & self._options.episodic_life
        # a game's last life ends it: the next step is its reset, whatever the action
        self._fire_next = ends & (lives > 0) & self._options.fire_reset
        return ends

    def _executed_actions(self, action: np.ndarray) -> np.ndarray:
        if self._fire is None:
            return action
        return np.where(self._fire_next, self._fire, action)


def _vector_env(game: str, options: AtariConfig, max_episode_steps: int | None):
    frames = options.max_episode_frames
    if max_episode_steps is not None:
        frames = max_episode_steps * options.frame_skip

    def make_vector_env(n: int):
        import gymnasium
        from ale_py.vector_env import AtariVectorEnv

        env = AtariVectorEnv(
            game=game,
            num_envs=n,
            max_num_frames_per_episode=frames,
            repeat_action_probability=options.repeat_action_probability,
            img_height=options.screen_size,
            img_width=options.screen_size,
            stack_num=1,  # heron stacks (len_history_for_policy), so the replay keeps frames
            frameskip=options.frame_skip,
            noop_max=options.noop_max,
            use_fire_reset=options.fire_reset,
            reward_clipping=False,  # heron's clip_rewards: returns are reported unclipped
            episodic_life=False,  # lost lives are read from info["lives"] (AtariEnv)
        )
        side = options.screen_size
        frame = gymnasium.spaces.Box(0, 255, (side, side, 1), np.uint8)
        # [n, 1, H, W] -> [n, H, W, 1]: the same bytes, channels last for the conv torsos
        return gymnasium.wrappers.vector.TransformObservation(
            env,
            lambda obs: obs.reshape(obs.shape[0], side, side, 1),
            single_observation_space=frame,
        )

    return make_vector_env


def _make(env_id, name, num_envs, max_episode_steps, options: AtariConfig | None) -> AtariEnv:
    options = AtariConfig() if options is None else options
    game = _registry_ids()[name]
    limit = max_episode_steps or options.max_episode_frames // options.frame_skip
    make_vector_env = _vector_env(game, options, max_episode_steps)
    return AtariEnv(make_vector_env, num_envs, env_id, limit, options)


def _make_one(env_id: str, name: str):
    import gymnasium

    _registry_ids()  # registers ale-py's ids
    return gymnasium.make(f"ALE/{name}", disable_env_checker=True)


FAMILY = Family(
    prefix="ale",
    form="'ale:<game>-v5' (e.g. ale:Breakout-v5)",
    find=find_in(_ids),
    make=_make,
    make_one=_make_one,
    jax_native=False,
    requires=("ale_py",),
    extra="atari",
    options="atari",
)
