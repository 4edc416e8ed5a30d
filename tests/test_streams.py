"""Every step an environment produces reaches the replay once, in order, and no replayed
transition joins two steps that did not follow each other (ALF: the replayer observes every
step; ``cycle_one_time`` replays each unroll once with the previous unroll's last step in
front). Checked step by step on counting environments, whose observation is their clock."""

from __future__ import annotations

import threading
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import ray

from heron import envs
from heron.distributed import actors as actors_module
from heron.distributed import pool as pool_module
from heron.distributed.source import ActorSteps, add_actor_steps
from heron.envs.wrappers import ObservationPipeline
from heron.replay import CycleOneTimeReplay, OneTimeReplay, UniformReplay
from heron.run_config import DistConfig
from heron.training.sources import EnvSource
from heron.types import StepType

CLOCK = 10  # custom_envs' observation [t / 10, 1]


class FirstAction:
    """A stand-in agent: always action 0 (episodes run to the time limit), no state."""

    uses_prev_action = False

    def act(self, agent_state, timestep, carry, key):
        return jnp.zeros(timestep.step_type.shape, jnp.int32), carry, {}

    def initial_carry(self, num_envs):
        return ()


def clock(steps) -> np.ndarray:
    """The environments' clock at each step [B, T]."""
    return np.rint(np.asarray(steps.observation)[..., 0] * CLOCK).astype(int)


def source_for(env_id: str, num_envs: int, unroll_length: int):
    env = envs.make(env_id, num_envs)
    source = EnvSource(env, ObservationPipeline(env.spec), unroll_length)
    agent = FirstAction()
    init = jax.jit(lambda key: source.init(agent, None, key))
    collect = jax.jit(lambda state, key: source.collect(agent, None, state, key))
    restart = jax.jit(lambda state, key: source.restart(agent, None, state, key))
    return source, init, collect, restart


@pytest.mark.parametrize("unroll_length", [1, 3])
def test_cycle_one_time_replays_every_unroll_once_behind_the_step_before_it(unroll_length):
    """At every unroll length (1 is CRR's, SVG0's and SAC's default) the first unroll is
    [the first step, its successors], each later one starts at its predecessor's last step,
    and none is refused or lost."""
    source, init, collect, _ = source_for("custom_envs:counter_pair", 2, unroll_length)
    replay = CycleOneTimeReplay(1, 2, unroll_length, 1)
    state, first = init(jax.random.key(0))
    replay_state = source.add(replay, replay.init(jax.tree.map(lambda x: x[:, 0], first)),
                              first, first=True)  # fmt: skip
    assert not bool(replay.can_sample(replay_state))
    stream = [clock(first)]
    windows = []
    for i in range(6):
        state, steps = collect(state, jax.random.key(i + 1))
        stream.append(clock(steps))
        assert bool(replay.can_add(replay_state, 0))
        replay_state = source.add(replay, replay_state, steps)
        assert bool(replay.can_sample(replay_state))
        batch, replay_state = replay.sample(replay_state, None)
        windows.append(clock(batch))
    assert int(replay_state.refused) == 0
    stream = np.concatenate(stream, axis=1)  # [B, 1 + 6 L]: what the environments produced
    for i, window in enumerate(windows):
        np.testing.assert_array_equal(
            window, stream[:, i * unroll_length : (i + 1) * unroll_length + 1]
        )


def test_a_restarted_host_environments_first_steps_are_collected():
    """After a resume a Gymnasium environment starts new episodes: their FIRST steps are
    the first steps collected (every replayer stores them; the transition into them is a
    restart, which learners mask), and nothing joins the old episode to the new one."""
    source, init, collect, restart = source_for("custom_envs:TinyEnv", 2, 3)
    state, first = init(jax.random.key(0))
    state, before = collect(state, jax.random.key(1))
    np.testing.assert_array_equal(clock(before), [[1, 2, 3], [1, 2, 3]])
    state = restart(state, jax.random.key(2))  # as a resumed run does with a checkpoint's state
    state, after = collect(state, jax.random.key(3))
    np.testing.assert_array_equal(clock(after), [[0, 1, 2], [0, 1, 2]])
    np.testing.assert_array_equal(
        np.asarray(after.step_type), [[StepType.FIRST, StepType.MID, StepType.MID]] * 2
    )
    replay = UniformReplay(num_envs=2, capacity=16, batch_size=1, sequence_length=2)
    replay_state = source.add(replay, replay.init(jax.tree.map(lambda x: x[:, 0], first)),
                              first, first=True)  # fmt: skip
    for steps in (before, after):
        replay_state = source.add(replay, replay_state, steps)
    stored = np.asarray(replay_state.data.step_type)[:, : int(replay_state.size)]
    assert (stored == StepType.FIRST).sum(axis=1).tolist() == [2, 2]  # run start and restart
    one_time = OneTimeReplay(num_envs=2, unroll_length=3)
    window_state = source.add(one_time, one_time.init(jax.tree.map(lambda x: x[:, 0], first)),
                              first, first=True)  # fmt: skip
    window_state = source.add(one_time, window_state, before)
    window_state = one_time.sample(window_state, None)[1]
    window, _ = one_time.sample(source.add(one_time, window_state, after), None)
    np.testing.assert_array_equal(clock(window), [[3, 0, 1, 2]] * 2)  # 3 -> 0 is a restart


def test_an_unroll_dropped_for_policy_lag_still_leads_the_actors_next_one(monkeypatch):
    """Asynchronous driver, ``max_policy_lag``: a dropped unroll is never trained on, and
    the actor's next unroll is replayed behind the dropped one's last step, never behind an
    older one (no window [3, 7, 8, 9])."""
    monkeypatch.setattr(ray, "put", lambda value: value)  # no cluster: the pool's own logic
    length = 3
    dist = DistConfig(driver="async", learn_queue_cap=1, max_policy_lag=1)
    spec = types.SimpleNamespace(envs_per_actor=1, env="custom_envs:counter_pair")
    pool = pool_module.ActorPool(spec, 1, dist, None, True)
    driver, actors = pool.driver, pool.actors

    def snapshot(last_clock):
        pending = {"clock": np.full((1,), last_clock, np.int32)}
        return types.SimpleNamespace(pending=pending)

    def unroll_of(first_clock, version):
        steps = {"clock": np.arange(first_clock, first_clock + length, dtype=np.int32)[None]}
        return actors_module.Unroll(steps, snapshot(first_clock + length - 1), version, 0.0, False)

    arriving = []  # what the actor finishes next, moved to its outbox when the pool waits

    class Arrivals(threading.Condition):
        def wait(self, timeout=None):
            assert arriving, "the pool waited for an unroll the test never made"
            request, unroll = arriving.pop(0)
            driver.outbox[0] = (request, unroll, request.index)

    driver._cond = Arrivals()
    actors.latest = actors.consumed = [snapshot(0)]
    replay = CycleOneTimeReplay(1, 1, length, 1)
    replay_state = replay.start(replay.init({"clock": jnp.zeros((1,), jnp.int32)}),
                                {"clock": jnp.zeros((1, 1), jnp.int32)})  # fmt: skip
    made = [(1, 0), (4, 0), (7, 5), (10, 5)]  # (first clock, version that acted)
    requests = [
        (actors_module.Request(0, i, np.zeros(2, np.uint32), v, None), unroll_of(c, v))
        for i, (c, v) in enumerate(made)
    ]
    windows = []
    # learner versions 0, 5 (the second unroll is 5 versions old: dropped), 6
    for learner_version, count in ((0, 1), (5, 2), (6, 1)):
        arriving.extend(requests[:count])
        del requests[:count]
        driver.outbox, driver.inflight = [None], [None]
        taken = driver.collect(None, learner_version)
        steps = jax.tree.map(jnp.asarray, ActorSteps(taken.steps, taken.actors, taken.leads))
        replay_state = add_actor_steps(replay, replay_state, steps)
        batch, replay_state = replay.sample(replay_state, None)
        windows.append(np.asarray(batch["clock"])[0].tolist())
    assert windows == [[0, 1, 2, 3], [6, 7, 8, 9], [9, 10, 11, 12]]
    assert int(actors.counters[actors_module.DROPPED]) == 1 and int(replay_state.refused) == 0


def test_observers_see_every_collected_step_once_in_order_and_log_what_they_return(tmp_path):
    """ALF's observers and step metrics from Python: each iteration's steps (the run's first
    steps with the first iteration's), every lane in time order, FIRST steps included; what
    an observer returns is logged as ``metrics/<name>``."""
    import json

    from contract_cases import CASES

    import heron
    from heron.configs import ConfigError
    from heron.training.driver import TrainingError

    seen = []

    def observer(experience):
        seen.append(experience)
        return {"mean_clock": float(np.mean(clock(experience)))}

    run = heron.RunConfig(env="custom_envs:counter_pair", steps=32, num_envs=2, n_evals=1,
                          eval_every_n=2)  # fmt: skip
    setup = heron.build("ppo", CASES["ppo"].config, run, observers=[observer])
    heron.train(setup, str(tmp_path / "run"))
    assert [clock(e).shape for e in seen] == [(2, 9), (2, 8)]  # first steps + 2 unrolls of 8
    stream = np.concatenate([clock(e) for e in seen], axis=1)
    types_ = np.concatenate([np.asarray(e.step_type) for e in seen], axis=1)
    assert np.all(types_[:, 0] == StepType.FIRST) and np.all(stream[:, 0] == 0)
    follows = (stream[:, 1:] == stream[:, :-1] + 1) | (types_[:, 1:] == StepType.FIRST)
    assert follows.all() and np.all(stream[types_ == StepType.FIRST] == 0)
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    logged = [line["metrics/mean_clock"] for line in lines if line["kind"] == "train"]
    assert logged == pytest.approx([float(np.mean(clock(e))) for e in seen])

    with pytest.raises(ConfigError, match="observers must be callables"):
        heron.build("ppo", CASES["ppo"].config, run, observers=[1])
    wrong = heron.build("ppo", CASES["ppo"].config, run, observers=[lambda e: 3.0])
    with pytest.raises(TrainingError, match="observer <lambda> returned float; an observer"):
        heron.train(wrong, str(tmp_path / "wrong"))


def test_prev_action_is_recorded_for_agents_that_ask_for_it():
    """ALF's prev_action: each step carries the action taken at the step before, zeros
    where an episode starts; agents that do not ask record nothing."""

    class Alternating(FirstAction):
        uses_prev_action = True

        def act(self, agent_state, timestep, carry, key):
            clock_ = jnp.rint(timestep.observation[..., 0] * CLOCK).astype(jnp.int32)
            return (clock_ + 1) % 3 % 2, carry, {}  # 1 (ends the episode) at clock 0 and 2

    env = envs.make("custom_envs:counter_pair", 2)
    source = EnvSource(env, ObservationPipeline(env.spec), 5)
    agent = Alternating()
    state, first = source.init(agent, None, jax.random.key(0))
    state, steps = source.collect(agent, None, state, jax.random.key(1))
    action = np.concatenate([np.asarray(first.action), np.asarray(steps.action)], axis=1)
    prev = np.concatenate([np.asarray(first.prev_action), np.asarray(steps.prev_action)], axis=1)
    types_ = np.concatenate([np.asarray(first.step_type), np.asarray(steps.step_type)], axis=1)
    expected = np.where(types_[:, 1:] == StepType.FIRST, 0, action[:, :-1])
    np.testing.assert_array_equal(prev[:, 1:], expected)
    np.testing.assert_array_equal(prev[:, 0], 0)
    assert (types_ == StepType.FIRST).sum() > 2 and action.max() == 1  # episodes restart
    plain, _ = source.init(FirstAction(), None, jax.random.key(2))
    _, steps = source.collect(FirstAction(), None, plain, jax.random.key(3))
    assert steps.prev_action == ()
