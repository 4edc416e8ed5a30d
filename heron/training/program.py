"""The compiled program of a run: K seeds vmapped into one init, one iteration and one
evaluation, for any agent, replayer and source.

One iteration: the source collects (or not) -> the steps enter the replay (and the agent
is told how many, when it asks) -> the agent learns while the replay can sample (at most
the source's ``learn_limit`` times). One call of the compiled ``iteration`` runs ``count``
of them: a run whose iterations are small (one env step and one update: SAC on a
Gymnasium env) would otherwise spend more time in the host's loop than in them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from heron import parallel
from heron.agents.base import Agent
from heron.parallel import over_seeds
from heron.training.sources import Source

_NO_LIMIT = 2**31 - 1


class TrainState(NamedTuple):
    """Everything a run needs to continue; saved whole in checkpoints."""

    agent_state: Any
    replay_state: Any
    source_state: Any
    key: jax.Array
    iteration: jax.Array  # int32


class Program(NamedTuple):
    """The compiled pieces of a run. States and keys carry a leading seed axis [K].

    init(keys [K]) -> state; iteration(state, count) -> (state, metrics [K]) after ``count``
    iterations (an int32 scalar >= 1: any count runs the same program; the metrics are
    ``combined``);
    evaluate(state, keys [K]) -> results [K, ...] (returns [K, n_temperatures, n_episodes]
    of an evaluation in the environment);
    restart(state, keys [K]) -> state (a resumed run's environments, where they restart).
    """

    init: Callable
    iteration: Callable
    evaluate: Callable
    restart: Callable


@dataclasses.dataclass(frozen=True)
class ReplayView:
    """``replay`` whose samples pass through ``transform`` (what the agent sees of the steps
    the replay keeps: observations normalised with the latest statistics)."""

    replay: Any
    transform: Callable

    def __getattr__(self, name):  # init, add, can_sample, sizes: the replay's own
        return getattr(self.replay, name)

    def sample(self, state, key):
        batch, state = self.replay.sample(state, key)
        return self.transform(batch), state


def learn_phase(agent: Agent, replay, agent_state, replay_state, key, limit: int | None):
    """``agent.learn`` while the replay can sample, at most ``limit`` times: (agent_state,
    replay_state, metrics averaged over the calls, ``train/updates`` summed)."""
    limit = _NO_LIMIT if limit is None else limit

    @jax.jit  # traced once for its metrics' shapes and the loop (the trace is cached)
    def learn(agent_state, replay_state, key):
        return agent.learn(agent_state, replay, replay_state, key)

    shapes = jax.eval_shape(learn, agent_state, replay_state, key)[2]
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes)

    def more(carry):
        _, replay_state, _, calls, _ = carry
        return parallel.same_for_all_seeds((calls < limit) & replay.can_sample(replay_state))

    def one(carry):
        agent_state, replay_state, key, calls, sums = carry
        key, learn_key = jax.random.split(key)
        agent_state, replay_state, metrics = learn(agent_state, replay_state, learn_key)
        sums = jax.tree.map(lambda total, m: total + m.astype(jnp.float32), sums, metrics)
        return agent_state, replay_state, key, calls + 1, sums

    carry = (agent_state, replay_state, key, jnp.zeros((), jnp.int32), zeros)
    agent_state, replay_state, _, calls, sums = jax.lax.while_loop(more, one, carry)
    count = jnp.maximum(calls, 1).astype(jnp.float32)
    metrics = {name: total / count for name, total in sums.items()}
    metrics["train/updates"] = sums.get("train/updates", calls.astype(jnp.float32))
    return agent_state, replay_state, metrics


NON_FINITE = "non_finite/"  # metrics the driver checks but does not log
EXPERIENCE = "experience"  # with observers: the iteration's steps, handed to them


def non_finite_inputs(steps) -> dict:
    """Counts of non-finite observations and rewards among the collected steps."""

    def count(x):
        return jnp.sum(~jnp.isfinite(jnp.asarray(x, jnp.float32))).astype(jnp.float32)

    return {
        f"{NON_FINITE}observations": sum(count(x) for x in jax.tree.leaves(steps.observation)),
        f"{NON_FINITE}rewards": count(steps.reward),
    }


LATEST = "schedule/"  # learned metrics that are a value in effect, not an average


class MetricTotals(NamedTuple):
    """The metrics of iterations run in one call, as they accumulate (``combined`` makes
    them one line: what the agent learned averaged over the iterations that learned, zero
    where none did, but for the values in effect (``schedule/*``), the last of those;
    ``train/updates`` and the non-finite counts summed; the source's metrics and observed
    steps of the last iteration. One iteration's are its own.)"""

    learned: dict  # sums (``LATEST``: the last) over the iterations that learned
    learned_in: jax.Array  # how many did
    updates: jax.Array  # train/updates, summed
    others: dict


def metric_totals(learned: dict, others: dict) -> MetricTotals:
    """One iteration's metrics as totals."""
    updates = learned["train/updates"]
    values = {k: v for k, v in learned.items() if k != "train/updates"}
    return MetricTotals(values, (updates > 0).astype(jnp.float32), updates, others)


def add_metrics(totals: MetricTotals, learned: dict, others: dict) -> MetricTotals:
    new = metric_totals(learned, others)

    def add(name, total, value):
        if name.startswith(LATEST):
            return jnp.where(new.learned_in > 0, value, total)
        return total + value

    return MetricTotals(
        {k: add(k, v, new.learned[k]) for k, v in totals.learned.items()},
        totals.learned_in + new.learned_in,
        totals.updates + new.updates,
        {k: totals.others[k] + v if k.startswith(NON_FINITE) else v for k, v in others.items()},
    )


def combined(totals: MetricTotals) -> dict:
    count = jnp.maximum(totals.learned_in, 1.0)
    learned = {k: v if k.startswith(LATEST) else v / count for k, v in totals.learned.items()}
    return {**learned, "train/updates": totals.updates, **totals.others}


def strongly_typed(tree):
    """``tree`` with no weakly typed leaf (same dtypes and values). Environments keep Python
    numbers in their states (gymnax's ``time = 0``, Pendulum's ``last_u = 0.0``), which JAX
    types weakly where an iteration's results are strong: a state that is weak in one place
    after init, strong after an iteration and strong again from a checkpoint would make the
    iteration one program per variant, each compiled on its own."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), tree)


def make_program(
    agent: Agent, replay, source: Source, evaluate: Callable, observe: bool = False
) -> Program:
    """``evaluate(agent_state, observations, key) -> results`` runs the run's evaluation
    (``evaluation.Evaluation.run``; ``make_evaluate``'s with ``axis_name=SEED_AXIS``). With
    ``observe`` the iteration's metrics also carry its steps (``EXPERIENCE``) for the
    host's observers."""

    def init_one(keys, agent_state):
        _, source_key, key = keys
        source_state, first_steps = source.init(agent, agent_state, source_key)
        example = jax.tree.map(lambda x: x[:, 0], source.lanes_of(first_steps))
        replay_state = source.add(replay, replay.init(example), first_steps, first=True)
        return TrainState(agent_state, replay_state, source_state, key, jnp.zeros((), jnp.int32))

    # One seed after another: vmapped, the orthogonal initialisers become a batched QR, whose
    # jaxlib CPU kernel was seen to deadlock its thread pool on a loaded machine. And a program
    # of its own: beside the host callbacks of a Gymnasium environment's first reset, the QR of
    # wider inputs (SAC's 256-unit layers on 17 observations: gym:HalfCheetah-v5, Walker2d-v5)
    # left XLA's CPU thread pool waiting for good in most runs.
    agent_init = jax.jit(lambda keys: jax.lax.map(agent.init, keys))
    sources_init = jax.jit(jax.vmap(init_one))

    def init(keys):
        keys = jax.vmap(lambda key: jax.random.split(key, 3))(keys)  # [K, 3]: agent, source, run
        return strongly_typed(sources_init(keys, agent_init(keys[:, 0])))

    @jax.jit  # traced once for its metrics' shapes and the loop (the trace is cached)
    def iteration_one(state: TrainState):
        """(state, what it learned, its other metrics)."""
        key, collect_key, learn_key = jax.random.split(state.key, 3)
        source_state, steps = source.collect(
            agent, state.agent_state, state.source_state, collect_key
        )
        replay_state, agent_state, metrics = state.replay_state, state.agent_state, {}
        if source.collects:
            replay_state = source.add(replay, replay_state, steps)
            if agent.observe_steps is not None:
                agent_state = agent.observe_steps(agent_state, source.collected(steps))
            lanes = source.lanes_of(steps)  # where non-finite values come from, if any
            metrics.update(non_finite_inputs(lanes))
            if observe:
                metrics[EXPERIENCE] = lanes
        seen = ReplayView(replay, source.view(source_state))
        agent_state, replay_state, learned = learn_phase(
            agent, seen, agent_state, replay_state, learn_key, source.learn_limit
        )
        metrics.update(source.metrics(source_state))
        new_state = TrainState(agent_state, replay_state, source_state, key, state.iteration + 1)
        return strongly_typed(new_state), learned, metrics

    def iterations_one(state: TrainState, count):
        """``count`` iterations, every one in the loop: the program holds one copy of the
        iteration (a first one outside the loop, run for the metrics' shapes, was a second
        copy for XLA to compile: 20-25% of an iteration program's compile time)."""
        _, learned, others = jax.eval_shape(iteration_one, state)
        zeros = lambda tree: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), tree)  # noqa: E731
        totals = metric_totals(zeros(learned), zeros(others))

        def body(_, carry):
            state, totals = carry
            state, learned, others = iteration_one(state)
            return state, add_metrics(totals, learned, others)

        state, totals = jax.lax.fori_loop(0, count, body, (state, totals))
        return state, combined(totals)

    def evaluate_one(state: TrainState, key):
        return evaluate(state.agent_state, source.observations(state.source_state), key)

    def restart_one(state: TrainState, key):
        source_state = source.restart(agent, state.agent_state, state.source_state, key)
        return strongly_typed(state._replace(source_state=source_state))

    return Program(
        init=init,  # two programs (above); exported as one by the program cache
        iteration=jax.jit(over_seeds(iterations_one, in_axes=(0, None)), donate_argnums=0),
        evaluate=jax.jit(over_seeds(evaluate_one)),
        restart=jax.jit(jax.vmap(restart_one)),
    )
