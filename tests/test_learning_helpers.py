"""The learning helpers agents compose: sequences cut from batches, epochs of shuffled
mini-batches with an early stop, the off-policy learn, and the data-parallel split."""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from heron.agents import learning
from heron.agents.base import MissingExtrasError
from heron.configs import ConfigError
from heron.replay import OneTimeReplay, UniformReplay


def _counting_update(size):
    """An update whose state counts updates and records which sequences it saw."""

    def update(state, batch, key):
        seen = state["seen"].at[batch[0]].add(1)  # batch [L, M]: first step ids of sequences
        return {"count": state["count"] + 1, "seen": seen}, {"count": state["count"] + 1.0}

    return update, {"count": jnp.zeros((), jnp.int32), "seen": jnp.zeros(size, jnp.int32)}


def test_sequences_are_windows_along_time_and_reference():
    batch = jnp.arange(2 * 7).reshape(2, 7)  # [B=2, T=7]
    disjoint = learning.sequences(batch[:, :6], 3, 3)
    np.testing.assert_array_equal(disjoint, [[0, 1, 2], [3, 4, 5], [7, 8, 9], [10, 11, 12]])
    overlapping = learning.sequences(batch, 3, 2)  # every transition inside one window
    expected = [list(row[s : s + 3]) for row in np.asarray(batch) for s in (0, 2, 4)]
    np.testing.assert_array_equal(overlapping, expected)
    assert learning.num_sequences(7, 3, 2) == 3 and learning.num_sequences(6, 3, 2) is None


def test_every_sequence_is_trained_once_per_epoch():
    update, state = _counting_update(16)
    batch = learning.sequences(jnp.arange(16).reshape(4, 4), 2, 2)  # 8 sequences of 2 steps
    state, metrics = learning.minibatch_epochs(
        update, state, batch, jax.random.PRNGKey(0), num_epochs=3, batch_size=2
    )
    assert int(state["count"]) == 12 and float(metrics["train/updates"]) == 12
    starts = np.arange(0, 16, 2)  # each sequence is contiguous: it starts at an even step
    np.testing.assert_array_equal(np.asarray(state["seen"])[starts], 3)
    assert np.asarray(state["seen"]).sum() == 24


def test_the_stop_predicate_sees_the_new_state_and_skips_the_rest():
    update, state = _counting_update(8)
    batch = learning.sequences(jnp.arange(8).reshape(2, 4), 1, 1)

    def stop(new_state, metrics):
        return new_state["count"] >= 3

    state, metrics = learning.minibatch_epochs(
        update, state, batch, jax.random.PRNGKey(0), num_epochs=4, batch_size=2, stop=stop
    )
    assert int(state["count"]) == 3 and float(metrics["train/updates"]) == 3
    assert float(metrics["count"]) == pytest.approx(2.0)  # the mean over the 3 updates run


def _off_policy_config(sequence_length, batch_size, unroll_length=1, ratio=0.25):
    return types.SimpleNamespace(
        sequence_length=sequence_length,
        batch_size=batch_size,
        unroll_length=unroll_length,
        replay=types.SimpleNamespace(ratio=ratio),
    )


def test_off_policy_learn_takes_one_sample_and_one_update_from_a_uniform_replay():
    update, state = _counting_update(100)
    replay = UniformReplay(num_envs=2, capacity=50, batch_size=4, sequence_length=3)
    steps = jnp.arange(100).reshape(2, 50)
    replay_state = replay.add(replay.init(steps[:, 0]), steps)
    learn = learning.replay_updates("crr", update, _off_policy_config(3, 4))
    state, _, metrics = learn(state, replay, replay_state, jax.random.PRNGKey(0))
    assert int(state["count"]) == 1 and float(metrics["train/updates"]) == 1


def test_off_policy_learn_on_a_whole_unroll_trains_on_every_transition_once():
    """From a consume-once replay, windows overlap by one step: every transition of the
    unroll lies in exactly one sequence; the replay ratio (updates per collected step) sets
    how many passes are made over it: 4 updates per pass over 4 x 8 new steps."""
    steps = jnp.arange(36).reshape(4, 9)
    replay = OneTimeReplay(num_envs=4, unroll_length=8)
    replay_state = replay.start(replay.init(steps[:, 0]), steps[:, :1])
    replay_state = replay.add(replay_state, steps[:, 1:])
    for ratio, passes in ((0.125, 1), (0.375, 3)):
        update, state = _counting_update(4 * 9)
        learn = learning.replay_updates("crr", update, _off_policy_config(3, 4, 8, ratio))
        state, after, metrics = learn(state, replay, replay_state, jax.random.PRNGKey(0))
        assert float(metrics["train/updates"]) == 4 * passes  # 4 envs x 4 windows / 4 each
        seen = np.asarray(state["seen"]).reshape(4, 9)
        np.testing.assert_array_equal(seen[:, [0, 2, 4, 6]], passes)  # window starts, stride 2
        np.testing.assert_array_equal(seen[:, [1, 3, 5, 7, 8]], 0)
        assert not bool(replay.can_sample(after))
    with pytest.raises(ConfigError, match=r"crr.replay.ratio=0.2 .* whole multiple of 0.125"):
        learning.unroll_passes("crr", _off_policy_config(3, 4, 8, 0.2), 4, 8)


def test_tiling_and_device_split_are_checked_with_the_field_names():
    class Config:
        sequence_length, unroll_length, batch_size = 3, 7, 4

    with pytest.raises(ConfigError, match=r"crr.sequence_length=3 does not tile unrolls of 8"):
        learning.check_tiling("crr", 8, 4, Config, overlap=True)
    with pytest.raises(ConfigError, match=r"ppo.batch_size=4 sequences per update cannot be"):
        learning.data_parallel(lambda *a: a, [None, None, None], "ppo", 4)
    update = object()
    assert learning.data_parallel(update, jax.devices()[:1], "ppo", 4) is update


# --------------------------------------------------------------------------- targets


def _online_after_each_update(count):
    keys = jax.random.split(jax.random.PRNGKey(0), count)
    return [{"w": jax.random.normal(k, (3,)), "b": jax.random.normal(k, ())} for k in keys]


@pytest.mark.parametrize("tau", [1.0, 0.5, 0.005])
@pytest.mark.parametrize("period", [1, 2, 3])
@pytest.mark.parametrize("with_this_update", [True, False])
def test_target_update_follows_a_plain_loop(tau, period, with_this_update):
    """Polyak steps (a copy at tau 1) after updates P, 2P, ... when ``updates`` counts this
    update, after updates 1, P + 1, ... (Acme's CRR) when it does not."""
    onlines = _online_after_each_update(7)
    target = expected = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    update = jax.jit(learning.target_update, static_argnums=(3, 4))
    for done, online in enumerate(onlines, start=1):
        count = done if with_this_update else done - 1
        target = update(online, target, jnp.asarray(count, jnp.int32), period, tau)
        if count % period == 0:
            expected = jax.tree.map(
                lambda o, t: np.asarray(o) if tau == 1.0 else tau * np.asarray(o) + (1 - tau) * t,
                online,
                expected,
            )
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), target, expected)


@pytest.mark.parametrize("tau", [1.0, 0.25])
@pytest.mark.parametrize("period", [1, 3])
def test_target_update_is_bit_for_bit_the_idioms_it_replaced(tau, period):
    """CRR's and SVG0's ``optax.periodic_update`` (tau 1), DQN's Polyak-or-copy every P and
    SAC's Polyak every P (``jnp.where``), as the agents wrote them. At tau 1 SAC computed
    ``1 * online + 0 * target``: the copy, for finite targets and online values other than
    -0.0 (which optimiser steps from zero-initialised or random parameters do not make)."""

    def dqn(online, target, count):
        moved = optax.incremental_update(online, target, tau) if tau < 1.0 else online
        return optax.periodic_update(moved, target, count, period)

    def sac(online, target, count):
        polyak = optax.incremental_update(online, target, tau)
        if period == 1:
            return polyak
        due = count % period == 0
        return jax.tree.map(lambda new, old: jnp.where(due, new, old), polyak, target)

    def copies(online, target, count):
        return optax.periodic_update(online, target, count, period)

    idioms = {"dqn": dqn, "sac": sac} if tau < 1.0 else {"dqn": dqn, "sac": sac, "copies": copies}
    for name, idiom in idioms.items():
        target = old = {"w": jnp.zeros(3), "b": jnp.zeros(())}
        for count, online in enumerate(_online_after_each_update(7), start=1):
            count = jnp.asarray(count, jnp.int32)
            target = jax.jit(learning.target_update, static_argnums=(3, 4))(
                online, target, count, period, tau
            )
            old = jax.jit(idiom)(online, old, count)
            leaves = zip(jax.tree.leaves(target), jax.tree.leaves(old), strict=True)
            for new_leaf, old_leaf in leaves:
                np.testing.assert_array_equal(new_leaf, old_leaf, err_msg=name)


# --------------------------------------------------------------------------- optimiser


def test_optimizer_clips_then_takes_the_direction_then_descends_by_the_rate():
    params, grads = {"w": jnp.array([1.0, -2.0])}, {"w": jnp.array([30.0, 40.0])}
    for max_grad_norm, clip in ((1.0, [optax.clip_by_global_norm(1.0)]), (math.inf, [])):
        config = types.SimpleNamespace(max_grad_norm=max_grad_norm, optimizer="adam")
        optimizer = learning.optimizer(config, eps=1e-5)
        new, _ = optimizer.step(grads, optimizer.init(params), params, 0.1)
        reference = optax.chain(*clip, optax.scale_by_adam(eps=1e-5))
        updates, _ = reference.update(grads, reference.init(params), params)
        np.testing.assert_array_equal(new["w"], params["w"] - 0.1 * updates["w"])
        np.testing.assert_allclose(new["w"], [0.9, -2.1], rtol=1e-5)  # Adam's first step


# --------------------------------------------------------------------------- rollout state


def test_sequences_start_from_the_state_recorded_before_their_step():
    config = types.SimpleNamespace(use_rollout_state=True)
    recorded = jnp.arange(3 * 2 * 4.0).reshape(3, 2, 4)  # [L, M, core]
    extras = learning.rollout_extras(config, recorded)
    batch = types.SimpleNamespace(step_type=jnp.zeros((3, 2), jnp.int32), extras=extras)
    np.testing.assert_array_equal(learning.start_state(config, "sac", batch, None, 1), recorded[1])
    config.use_rollout_state = False
    assert learning.rollout_extras(config, recorded) == {}
    zeros = learning.start_state(config, "sac", batch, lambda m: jnp.zeros((m, 4)))
    assert zeros.shape == (2, 4)
    missing = types.SimpleNamespace(step_type=batch.step_type, extras={})
    config.use_rollout_state = True
    with pytest.raises(MissingExtrasError, match=r"sac needs extras\['rollout_state'\]"):
        learning.start_state(config, "sac", missing, None)
