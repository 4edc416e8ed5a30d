import gymnasium
import numpy as np
import pytest
from gymnax.environments import spaces as gymnax_spaces

from heron.specs import SpaceError, action_spec_from_space, analyze_action_space


@pytest.mark.parametrize(
    "space, expected",
    [
        (gymnasium.spaces.Discrete(5), (1, 5)),
        (gymnasium.spaces.MultiDiscrete([3, 3]), (2, 3)),
        (gymnasium.spaces.MultiDiscrete([4, 4, 4]), (3, 4)),
        (gymnax_spaces.Discrete(2), (1, 2)),
    ],
)
def test_analyzes_discrete_spaces(space, expected):
    assert analyze_action_space(space) == expected


def test_refuses_multidiscrete_with_unequal_categories():
    with pytest.raises(SpaceError, match=r"unequal categories \[2, 3\]"):
        analyze_action_space(gymnasium.spaces.MultiDiscrete([2, 3]))


@pytest.mark.parametrize(
    "space",
    [gymnasium.spaces.Box(0, 1, (2, 3)), gymnax_spaces.Box(-2.0, 2.0, (1,), np.float32)],
)
def test_box_is_continuous_not_discrete(space):
    with pytest.raises(SpaceError, match="continuous"):
        analyze_action_space(space)
    spec = action_spec_from_space(space)
    assert spec.kind == "continuous"
    assert spec.action_shape == tuple(space.shape)


def test_action_specs():
    multi = action_spec_from_space(gymnasium.spaces.MultiDiscrete([3, 3]))
    assert (multi.kind, multi.n_controls, multi.n_actions, multi.action_shape) == (
        "discrete",
        2,
        3,
        (2,),
    )
    single = action_spec_from_space(gymnasium.spaces.Discrete(4))
    assert single.action_shape == () and single.n_actions == 4
    box = action_spec_from_space(gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    assert box.low == (-2.0,) and box.high == (2.0,)


def test_refuses_unbounded_box_actions():
    with pytest.raises(SpaceError, match="infinite bounds"):
        action_spec_from_space(gymnasium.spaces.Box(-np.inf, np.inf, (2,)))
