"""Dict and Tuple observations: flattened at the environment (``EnvSpec.observation_parts``),
each part encoded by itself in every agent's networks (an embedding for a Discrete part, the
image torso's conv layers for an image), through normalisation, replay, datasets (Minari's
Dict spaces), ``heron.load`` policies and ``check-env``."""

from __future__ import annotations

import itertools
import json
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dict_envs import (
    DictTarget,
    GymDictCue,
    MissingPartEnv,
    TextPartEnv,
    WrongPartShapeEnv,
    cue_answer,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import heron
from heron import api, envs
from heron.cli import main
from heron.configs import ConfigError
from heron.envs.wrappers import ObservationPipeline
from heron.networks import DenseHead
from heron.networks.network import EMBEDDING_SIZE, NetworkConfig, make_network
from heron.offline.dataset import read_dataset
from heron.run_config import RunConfig
from heron.specs import (
    SpaceError,
    flatten_observation,
    normalized_entries,
    observation_dtype_from_space,
    observation_parts_from_space,
    observation_shape_from_space,
    unflatten_observation,
)

spaces = gymnasium.spaces

# --------------------------------------------------------------------------- spaces


def test_the_parts_of_a_nested_space_in_the_spaces_order():
    space = spaces.Dict(
        {
            "b": spaces.Tuple((spaces.Discrete(4), spaces.Box(0, 255, (5, 5, 3), np.uint8))),
            "a": spaces.Box(-1.0, 1.0, (2, 3), np.float32),
            "m": spaces.MultiBinary(3),
        }
    )
    parts = observation_parts_from_space(space)
    assert [(p.name, p.shape, p.image, p.categories) for p in parts] == [
        ("a", (2, 3), False, None),
        ("b.0", (), False, 4),
        ("b.1", (5, 5, 3), True, None),
        ("m", (3,), False, None),
    ]
    assert observation_shape_from_space(space) == (6 + 1 + 75 + 3,)
    assert observation_dtype_from_space(space) == np.float32
    images = spaces.Tuple([spaces.Box(0, 255, (2, 2, 1), np.uint8)] * 2)
    assert observation_dtype_from_space(images) == np.uint8  # bytes kept where all are images
    entries = normalized_entries(parts)
    assert entries.tolist() == [True] * 6 + [False] * 76 + [True] * 3


@pytest.mark.parametrize(
    "space, part",
    [
        (spaces.Dict({"ok": spaces.Discrete(2), "m": spaces.MultiDiscrete([2, 3])}), "'m'"),
        (spaces.Dict({"goal": spaces.Dict({"mission": spaces.Text(8)})}), "'goal.mission'"),
    ],
)
def test_a_part_heron_cannot_encode_is_named(space, part):
    with pytest.raises(SpaceError, match=f"unsupported part {part} of the observation space"):
        observation_parts_from_space(space)


_LEAVES = st.one_of(
    st.integers(2, 5).map(spaces.Discrete),
    st.tuples(st.integers(1, 3), st.integers(1, 3)).map(
        lambda shape: spaces.Box(-2.0, 2.0, shape, np.float32)
    ),
    st.just(spaces.Box(0, 255, (2, 3, 1), np.uint8)),
    st.integers(1, 4).map(spaces.MultiBinary),
)
_SPACES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(spaces.Tuple),
        st.dictionaries(st.sampled_from("xyz"), children, min_size=1, max_size=3).map(spaces.Dict),
    ),
    max_leaves=6,
).filter(lambda space: isinstance(space, spaces.Dict | spaces.Tuple))


@settings(max_examples=40, deadline=None)
@given(_SPACES, st.integers(0, 2**31 - 1))
def test_flattening_a_dict_observation_and_back_is_exact(space, seed):
    space.seed(seed)
    batch = [space.sample() for _ in range(3)]
    parts = observation_parts_from_space(space)
    dtype = observation_dtype_from_space(space)
    (size,) = observation_shape_from_space(space)
    stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *batch)
    flat = flatten_observation(parts, stacked, 1, dtype)
    assert flat.shape == (3, size) and flat.dtype == dtype
    for index, observation in enumerate(batch):  # one at a time, as jax.numpy does it
        one = flatten_observation(parts, observation, 0, dtype, xp=jnp)
        np.testing.assert_array_equal(np.asarray(one), flat[index])
    back = unflatten_observation(parts, flat)
    assert jax.tree.structure(back) == jax.tree.structure(stacked)
    for got, sampled in zip(jax.tree.leaves(back), jax.tree.leaves(stacked), strict=True):
        np.testing.assert_array_equal(got, sampled)
    assert space.contains(jax.tree.map(lambda leaf: leaf[0], back))


# --------------------------------------------------------------------------- networks


def _cue(cue=0, cell=0, sign=0.5):
    picture = np.zeros(9, np.uint8)
    picture[cell] = 255
    return {"cue": cue, "picture": picture.reshape(3, 3, 1), "sign": np.array([sign], np.float32)}


@pytest.mark.parametrize("torso", ["mlp", "conv"])
def test_every_part_reaches_the_network(torso):
    spec = envs.make("heron:DictCue-v0").spec
    parts = spec.observation_parts
    net = make_network(
        NetworkConfig(torso=torso),
        DenseHead((3,), 1.0),
        spec.observation_shape,
        observation_parts=parts,
    )
    params = net.init(jax.random.PRNGKey(0))
    embedding = params["params"]["Embed_0"]["embedding"]
    assert embedding.shape == (3, EMBEDDING_SIZE)  # the cue's categories, embedded
    if torso == "conv":  # the picture through the conv layer, the rest beside its features
        assert params["params"]["ImageFeatures_0"]["Conv_0"]["kernel"].shape == (3, 3, 1, 16)

    def out(observation):
        flat = flatten_observation(parts, observation, 0, spec.observation_dtype)
        return np.asarray(net.step(params, (), flat[None], np.ones(1, bool))[1][0])

    base = out(_cue())
    for changed in (_cue(cue=2), _cue(cell=4), _cue(sign=-0.5)):
        assert not np.allclose(out(changed), base)


def test_an_image_torso_needs_an_image_part():
    spec = envs.make(envs.id_of(DictTarget())).spec
    with pytest.raises(ConfigError, match="no part of these Dict observations is one"):
        make_network(
            NetworkConfig(torso="conv"),
            DenseHead(),
            spec.observation_shape,
            observation_parts=spec.observation_parts,
        )


def test_normalisation_leaves_images_and_categories_alone():
    spec = envs.make("heron:DictCue-v0").spec  # parts: cue [0], picture [1:10], sign [10]
    pipeline = ObservationPipeline(spec, normalize=True)
    stats = types.SimpleNamespace(mean=np.full(11, 5.0), var=np.full(11, 4.0))
    observation = flatten_observation(spec.observation_parts, _cue(2, 3, 0.5), 0, np.float32)
    normalized = np.asarray(pipeline.normalize_observation(stats, jnp.asarray(observation)))
    np.testing.assert_array_equal(normalized[:10], observation[:10])
    np.testing.assert_allclose(normalized[10], (0.5 - 5.0) / 2.0, rtol=1e-6)


# --------------------------------------------------------------------------- learning


@pytest.fixture(scope="module")
def dict_cue_ppo(tmp_path_factory):
    """PPO's defaults on heron:DictCue-v0, seeds 0-3 in one program, 60k steps. Measured:
    best greedy 8.75 / 8.25 / 10.0 / 8.125 (final 7.5 / 6.75 / 9.75 / 7.75); an agent that
    ignores the cue or the picture earns about 3.3, one that ignores the sign 5 at most."""
    run_dir = tmp_path_factory.mktemp("dict_cue") / "run"
    run = RunConfig(env="heron:DictCue-v0", steps=60_000, seeds=4)
    return api.train(api.build("ppo", None, run), str(run_dir)), run_dir


@pytest.mark.slow
def test_ppo_reads_every_part_of_a_dict_observation(dict_cue_ppo):
    summary, _ = dict_cue_ppo
    best = [seed["best_eval_return"] for seed in summary["per_seed"]]
    assert min(best) >= 7.0, best


@pytest.mark.slow
def test_a_loaded_policy_takes_dict_observations(dict_cue_ppo):
    _, run_dir = dict_cue_ppo
    policy = heron.load(str(run_dir), best=True)
    contexts = [
        _cue(cue, cell, sign)
        for cue, cell, sign in itertools.product(range(3), range(9), (-0.5, 0.5))
    ]
    batch = jax.tree.map(lambda *leaves: np.stack(leaves), *contexts)
    actions = policy(batch)
    assert actions.shape == (54,)
    right = np.mean([a == cue_answer(c) for a, c in zip(actions, contexts, strict=True)])
    assert right > 0.6, right  # by chance 1/3; without the sign 1/2 at best
    policy.reset()
    assert [int(policy(c)) for c in contexts[:4]] == actions[:4].tolist()
    with pytest.raises(SpaceError, match="no part 'sign'"):
        policy({"cue": 0, "picture": np.zeros((3, 3, 1), np.uint8)})


# --------------------------------------------------------------------------- host envs


def test_gymnasium_dict_observations_through_training_collection_and_offline(tmp_path):
    """A Gymnasium Dict env through the CLI: DQN trains on it, ``collect`` writes a Minari
    dataset with its Dict space, CRR trains offline from that dataset."""
    run, data = tmp_path / "dqn", tmp_path / "data"
    argv = ["train", "dqn", "--env", "dict_envs:GymDictCue", "--steps", "1500"]
    assert main([*argv, "--run-dir", str(run), "--eval-every-n", "50"]) == 0
    assert main(["collect", str(run), "--episodes", "3", "--out", str(data)]) == 0
    dataset = read_dataset(data)
    assert dataset.observation_space == gymnasium.spaces.Dict(
        {
            "cue": spaces.Discrete(3),
            "picture": spaces.Box(0, 255, (3, 3, 1), np.uint8),
            "sign": spaces.Box(-np.inf, np.inf, (1,), np.float32),
        }
    )
    observations = dataset.episodes[0].observations  # heron's flattened form
    assert observations.shape == (11, 11) and observations.dtype == np.float32
    assert set(np.unique(observations[:, 1:10])) <= {0.0, 255.0}
    from minari.dataset.minari_storage import MinariStorage

    raw = next(iter(MinariStorage.read(data).get_episodes([0])))["observations"]
    assert raw["picture"].dtype == np.uint8 and raw["picture"].shape == (11, 3, 3, 1)
    np.testing.assert_array_equal(raw["cue"], observations[:, 0])
    offline = tmp_path / "crr"
    argv = ["train", "crr", "--dataset", str(data), "--steps", "64", "--eval-every-n", "4"]
    assert main([*argv, "--updates-per-iteration", "16", "--run-dir", str(offline)]) == 0
    lines = [json.loads(line) for line in open(offline / "metrics.jsonl")]
    assert any(line["kind"] == "eval" for line in lines)


def test_a_continuous_agent_on_dict_observations(tmp_path):
    """SAC (the actor-critic plumbing TD3, CRR and SVG0 share) on a Gymnasium Dict env:
    trains, checkpoints, and its loaded policy acts on Dict observations."""
    run = RunConfig(env=DictTarget(), steps=600, num_envs=2, eval_every_n=50, n_evals=2)
    summary = api.train(api.build("sac", None, run), str(tmp_path / "run"))
    assert summary["steps"] >= 600 and np.isfinite(summary["final_eval_return"])
    policy = heron.load(str(tmp_path / "run"))
    action = policy({"flag": 1, "target": np.array([0.3], np.float32)})
    assert action.shape == (1,) and -1.0 <= float(action[0]) <= 1.0


def test_blackjacks_tuple_observations_are_served():
    env = envs.make("gym:Blackjack-v1", num_envs=2)
    parts = env.spec.observation_parts
    assert [(p.name, p.categories) for p in parts] == [("0", 32), ("1", 11), ("2", 2)]
    assert env.spec.observation_shape == (3,)


# --------------------------------------------------------------------------- check-env


def test_check_env_checks_each_part():
    for env in (GymDictCue(), "heron:DictCue-v0", "gym:Blackjack-v1"):
        report = envs.check(env, steps=200)
        assert report.ok, report.problems
    missing = envs.check(MissingPartEnv(), steps=20)
    assert missing.problems == [
        "reset: the observation has the parts ['cue', 'picture'], the observation space "
        "['cue', 'picture', 'sign']"
    ]
    shape = envs.check(WrongPartShapeEnv(), steps=20)
    assert shape.problems == [
        "reset, part 'picture': the observation has shape (3, 3), the observation space says "
        "(3, 3, 1)"
    ]
    text = envs.check(TextPartEnv(), steps=20)
    assert len(text.problems) == 1 and "unsupported part 'mission'" in text.problems[0]
