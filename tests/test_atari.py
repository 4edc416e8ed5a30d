"""Images from the environment to the network as uint8, and the ale: family (ale-py's Atari
games): frames, lost lives as discounts of 0, rewards clipped for the learner only."""

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest

from heron import envs
from heron.configs import ConfigError
from heron.envs.families.ale import AtariConfig
from heron.envs.wrappers import ObservationPipeline
from heron.run_config import RunConfig
from heron.specs import EnvSpec, action_spec_from_space, is_image_space
from heron.types import StepType, TimeStep

BREAKOUT = "ale:Breakout-v5"


@pytest.mark.parametrize(
    "space, image",
    [
        (gymnasium.spaces.Box(0, 255, (84, 84, 1), np.uint8), True),
        (gymnasium.spaces.Box(0, 1, (84, 84, 1), np.uint8), False),  # a mask, not pixels
        (gymnasium.spaces.Box(0.0, 255.0, (84, 84, 1), np.float32), False),
        (gymnasium.spaces.Discrete(3), False),
    ],
)
def test_images_are_uint8_boxes_of_0_to_255(space, image):
    assert is_image_space(space) == image


def _frames_spec(shape=(2, 2, 1)):
    return EnvSpec(shape, np.uint8, action_spec_from_space(gymnasium.spaces.Discrete(2)))


def _steps(frames, rewards, step_types):
    return TimeStep(
        step_type=jnp.asarray(step_types, jnp.int32),
        reward=jnp.asarray(rewards, jnp.float32),
        discount=jnp.ones(len(rewards), jnp.float32),
        observation=jnp.asarray(frames, jnp.uint8),
    )


def test_the_pipeline_keeps_frames_as_uint8_and_stacks_them():
    pipeline = ObservationPipeline(_frames_spec(), history=3)
    assert pipeline.spec.observation_shape == (3, 2, 2, 1)
    assert pipeline.spec.observation_dtype == np.uint8
    state = pipeline.init(2)
    assert state.history.dtype == jnp.uint8
    seen = []
    for t, step_type in enumerate([StepType.FIRST, StepType.MID, StepType.MID]):
        frames = np.full((2, 2, 2, 1), 200 + t, np.uint8)
        state, step = pipeline.apply(state, _steps(frames, [0.0, 0.0], [step_type] * 2), True)
        seen.append(step.observation)
    assert all(observation.dtype == jnp.uint8 for observation in seen)
    # oldest first; the FIRST step's frame fills the history
    np.testing.assert_array_equal(seen[-1][0, :, 0, 0, 0], [200, 201, 202])
    np.testing.assert_array_equal(seen[0][0, :, 0, 0, 0], [200, 200, 200])


def test_normalised_frames_are_float32_for_the_agent():
    pipeline = ObservationPipeline(_frames_spec(), normalize=True)
    assert pipeline.spec.observation_dtype == jnp.float32
    state, step = pipeline.apply(
        pipeline.init(2), _steps(np.full((2, 2, 2, 1), 7, np.uint8), [0.0, 0.0], [0, 0]), True
    )
    assert step.observation.dtype == jnp.float32


def test_clipped_rewards_are_their_signs_times_the_scale():
    pipeline = ObservationPipeline(_frames_spec(), reward_scale=0.5, clip_rewards=True)
    rewards = [-7.0, 0.0, 0.2, 30.0]
    _, step = pipeline.record(
        pipeline.init(4), _steps(np.zeros((4, 2, 2, 1)), rewards, [1] * 4), True
    )
    np.testing.assert_array_equal(step.reward, [-0.5, 0.0, 0.5, 0.5])


@pytest.mark.parametrize(
    "run, message",
    [
        (
            dict(env="gymnax:CartPole-v1", atari=AtariConfig(noop_max=0)),
            r"atari.\* options set up ale: environments; 'gymnax:CartPole-v1' is not one",
        ),
        (
            dict(clip_rewards=True, normalize_rewards=True),
            r"clip_rewards and normalize_rewards both rescale",
        ),
        (dict(env=BREAKOUT, atari=AtariConfig(frame_skip=0)), r"atari.frame_skip must be >= 1"),
    ],
)
def test_options_that_would_be_ignored_or_fight_are_refused(run, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**run)


def test_an_unknown_game_names_the_valid_ones():
    with pytest.raises(envs.UnknownEnvError, match=r"unknown ale environment 'Nope-v5'.*Alien-v5"):
        envs.make("ale:Nope-v5")


def _play(env, steps, seed=0):
    """TimeSteps of ``steps`` random actions from a reset, stepped on the host."""
    rng = np.random.default_rng(seed)
    out = [env._host_reset(seed)]
    for _ in range(steps):
        out.append(env._host_step(rng.integers(0, env.spec.action.n_actions, env.num_envs)))
    return out


def test_breakouts_frames_are_uint8_and_a_lost_life_ends_bootstrapping_not_the_game():
    env = envs.make(BREAKOUT, 2)
    assert env.spec.observation_shape == (84, 84, 1)
    assert env.spec.observation_dtype == np.uint8
    assert env.spec.max_episode_steps == 108_000 // 4
    steps = _play(env, 400)
    assert all(step.observation.dtype == np.uint8 for step in steps)
    assert all(step.observation.shape == (2, 84, 84, 1) for step in steps)
    step_type = np.stack([step.step_type for step in steps])
    discount = np.stack([step.discount for step in steps])
    cut = (discount == 0) & (step_type == StepType.MID)  # lives lost, the game going on
    assert cut.sum() >= 4, "random play loses lives within 400 steps"
    over = step_type == StepType.LAST
    assert over.sum() <= cut.sum() / 4  # five lives a game
    env.close()
    # without episodic_life only the game's end cuts bootstrapping
    whole = envs.make(BREAKOUT, 2, options=AtariConfig(episodic_life=False))
    steps = _play(whole, 400)
    discount = np.stack([step.discount for step in steps])
    step_type = np.stack([step.step_type for step in steps])
    np.testing.assert_array_equal(discount == 0, step_type == StepType.LAST)
    whole.close()


def _games_ended_by_noops(options, steps):
    env = envs.make(BREAKOUT, 2, options=options)
    env._host_reset(0)
    ended = 0
    for _ in range(steps):
        ended += int((env._host_step(np.zeros(2, np.int64)).step_type == StepType.LAST).sum())
    env.close()
    return ended


def test_the_action_after_a_lost_life_is_fire_so_a_policy_that_never_fires_ends_its_games():
    """As SB3's FireResetEnv under its EpisodicLifeEnv: a greedy policy that never presses
    FIRE must not stall a game of Breakout until its time limit. Playing only NOOP, both
    games (five lives each) end within 200 steps (at 120 and 121 with seed 0); with FIRE only
    at the game's start (episodic_life off) the ball is never served again."""
    assert _games_ended_by_noops(AtariConfig(), 200) == 2
    assert _games_ended_by_noops(AtariConfig(episodic_life=False), 200) == 0


def test_a_small_ppo_run_on_breakout_keeps_its_frames_as_uint8_to_the_network(tmp_path):
    """A few hundred steps through the real ALE env: the frames stay bytes in the source,
    the replay and the checkpoint (a quarter of float32's memory)."""
    import jax

    from heron.agents import NetworkConfig, PPOConfig
    from heron.api import build, load_run, train

    network = NetworkConfig(
        torso="conv", conv_channels=(4,), conv_kernel_sizes=(8,), conv_strides=(4,),
        hidden_sizes=(16,), activation="relu",
    )  # fmt: skip
    config = PPOConfig(network=network, unroll_length=16, batch_size=16, num_epochs=1)
    run = RunConfig(
        env=BREAKOUT, num_envs=2, steps=64, len_history_for_policy=4, clip_rewards=True,
        n_evals=1, eval_temperatures=(0.0,), max_timestep_eval=50, eval_every_n=2,
    )  # fmt: skip
    summary = train(build("ppo", config, run), str(tmp_path / "run"))
    assert summary["steps"] == 64 and np.isfinite(summary["final_eval_return"])
    _, _, state, _ = load_run(str(tmp_path / "run"))
    frames = [
        leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.replay_state)
        if "observation" in jax.tree_util.keystr(path)
    ]
    assert frames and all(leaf.dtype == np.uint8 for leaf in frames)
    # [seeds, envs, unroll + 1, history, 84, 84, 1]: one byte a pixel
    assert frames[0].shape[-4:] == (4, 84, 84, 1)
    assert frames[0].nbytes == np.prod(frames[0].shape)


def _dqn_on_breakout(capacity):
    from heron.agents import DQNConfig, NetworkConfig
    from heron.agents.base import ReplayConfig

    network = NetworkConfig(
        torso="conv", conv_channels=(4,), conv_kernel_sizes=(8,), conv_strides=(4,),
        hidden_sizes=(16,), activation="relu",
    )  # fmt: skip
    config = DQNConfig(network=network, replay=ReplayConfig(capacity=capacity))
    return config, RunConfig(env=BREAKOUT, num_envs=2, len_history_for_policy=4)


def test_dqns_replay_keeps_one_frame_a_step_of_the_four_it_stacks():
    import jax

    from heron.api import build
    from heron.training.driver import seed_keys

    config, run = _dqn_on_breakout(1000)
    setup = build("dqn", config, run)
    assert setup.replay.frame_history == 4
    state = jax.eval_shape(setup.program().init, seed_keys(setup.seeds))
    frames = state.replay_state.data.observation
    assert frames.shape == (1, 2, 1000, 84, 84, 1) and frames.dtype == np.uint8


def test_a_replay_that_cannot_fit_in_memory_is_refused_with_what_it_would_take():
    import jax

    from heron.api import build
    from heron.training.driver import check_replay_fits

    rings = jax.ShapeDtypeStruct((1, 1, 1_000_000, 4, 84, 84, 1), np.uint8)
    with pytest.raises(ConfigError, match=r"would take 26.3 GiB and this machine has 20.0 GiB"):
        check_replay_fits("dqn", {"observation": rings}, available=20 * 2**30)
    check_replay_fits("dqn", {"observation": rings}, available=27 * 2**30)
    config, run = _dqn_on_breakout(100_000_000)  # 2 x 100M frames: 1.3 TiB
    with pytest.raises(ConfigError, match=r"lower dqn.replay.capacity"):
        build("dqn", config, run)


def test_datasets_declare_image_observations_as_uint8():
    from heron.offline.dataset import gym_spaces

    observation_space, _ = gym_spaces(_frames_spec((84, 84, 1)))
    assert observation_space == gymnasium.spaces.Box(0, 255, (84, 84, 1), np.uint8)
    vectors = EnvSpec((3,), np.float32, action_spec_from_space(gymnasium.spaces.Discrete(2)))
    assert gym_spaces(vectors)[0].dtype == np.float32
