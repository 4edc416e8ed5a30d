"""How agents learn, in small composable pieces (rejax's ``train_iteration``, ALF's
``_train``): cut experience into training sequences, run epochs of shuffled mini-batches,
sample from a replay, split an update over devices, step an optimiser by the scheduled
learning rate, move target networks, start sequences from the recorded recurrent state.

Batches are batch-major [B, T, ...] in the replay and time-major [L, M, ...] inside an
agent's ``update(state, batch, key) -> (state, metrics)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from heron import ops, parallel, replay
from heron.agents.base import ROLLOUT_STATE, extra
from heron.configs import ConfigError
from heron.schedules import as_schedule


def sequences(batch, length: int, stride: int):
    """Windows of ``length`` steps every ``stride`` steps along the time axis of ``batch``
    [B, T, ...] -> [B * n, length, ...], each row's windows adjacent; ``(T - length)`` must
    be a multiple of ``stride``. ``stride = length`` cuts disjoint sequences (per-step
    targets already computed); ``stride = length - 1`` overlaps them by one step, so every
    transition t -> t+1 lies inside one sequence."""
    steps = jax.tree.leaves(batch)[0].shape[1]
    count = (steps - length) // stride + 1
    starts = stride * jnp.arange(count)
    index = starts[:, None] + jnp.arange(length)  # [n, length]

    def windows(x):
        cut = x[:, index]  # [B, n, length, ...]
        return cut.reshape((-1, length) + x.shape[2:])

    return jax.tree.map(windows, batch)


def num_sequences(steps: int, length: int, stride: int) -> int | None:
    """How many windows ``sequences`` cuts from ``steps`` steps, or None when they do not
    tile the steps exactly."""
    if steps < length or (steps - length) % stride:
        return None
    return (steps - length) // stride + 1


def time_major(tree):
    """[M, L, ...] -> [L, M, ...]."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tree)


def minibatch_epochs(
    update: Callable,
    state,
    batch,
    key,
    *,
    num_epochs: int,
    batch_size: int,
    stop: Callable | None = None,
):
    """ALF's mini-batch loop: ``num_epochs`` passes over the sequences ``batch`` [N, L, ...],
    each shuffled and split into mini-batches of ``batch_size`` sequences, each given to
    ``update`` time-major [L, batch_size]. Once ``stop(state, metrics)`` holds, the
    remaining updates are skipped. Returns (state, metrics averaged over the updates run,
    with ``train/updates`` their count)."""
    n_sequences = jax.tree.leaves(batch)[0].shape[0]
    n_minibatches = n_sequences // batch_size
    shuffle = num_epochs > 1 or n_minibatches > 1
    update = jax.jit(update)  # traced once for both branches below, and for their shapes

    def one_update(carry, inputs):
        state, stopped = carry
        minibatch, update_key = inputs

        def run(state):
            return update(state, time_major(minibatch), update_key)

        if stop is None:
            state, metrics = run(state)
            return (state, stopped), (metrics, ~stopped)

        def skip(state):
            metrics_shape = jax.eval_shape(run, state)[1]
            return state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)

        state, metrics = jax.lax.cond(stopped, skip, run, state)
        performed = ~stopped
        return (state, stopped | (performed & stop(state, metrics))), (metrics, performed)

    def one_epoch(carry, epoch_key):
        shuffle_key, update_key = jax.random.split(epoch_key)
        order = jax.random.permutation(shuffle_key, n_sequences) if shuffle else None
        minibatches = jax.tree.map(
            lambda x: (x[order] if shuffle else x).reshape(
                (n_minibatches, batch_size) + x.shape[1:]
            ),
            batch,
        )
        keys = jax.random.split(update_key, n_minibatches)
        return jax.lax.scan(one_update, carry, (minibatches, keys))

    (state, _), (metrics, performed) = jax.lax.scan(
        one_epoch, (state, jnp.zeros((), bool)), jax.random.split(key, num_epochs)
    )
    weights = performed.astype(jnp.float32)
    count = jnp.sum(weights)
    mean = jax.tree.map(lambda m: jnp.sum(m * weights) / jnp.maximum(count, 1.0), metrics)
    mean["train/updates"] = count
    return state, mean


def replay_updates(agent: str, update: Callable, config) -> Callable:
    """The ``learn`` of an off-policy agent (``config`` has ``sequence_length``,
    ``batch_size``, ``unroll_length`` and ``replay.ratio``): one sample from the replay, cut
    into sequences of ``sequence_length`` steps overlapping by one step, then mini-batch
    updates over them. A ``uniform`` sample is one mini-batch, and the replay's rate limit
    keeps ``replay.ratio`` updates per collected step. Whole unrolls (``cycle_one_time``)
    come once each: they are passed over ``unroll_passes`` times, which makes the same
    ratio."""
    length, batch_size = config.sequence_length, config.batch_size

    def learn(state, replay, replay_state, key):
        sample_key, update_key = jax.random.split(key)
        batch, replay_state = replay.sample(replay_state, sample_key)
        passes = 1
        if replay.whole_unrolls:
            lanes, steps = jax.tree.leaves(batch)[0].shape[:2]
            passes = unroll_passes(agent, config, lanes, steps - 1)
        batch = sequences(batch, length, max(length - 1, 1))
        state, metrics = minibatch_epochs(
            update, state, batch, update_key, num_epochs=passes, batch_size=batch_size
        )
        return state, replay_state, metrics

    return learn


def unroll_passes(agent: str, config, lanes: int, unroll_length: int) -> int:
    """Passes over a batch of ``lanes`` whole unrolls of ``unroll_length`` new steps (and
    the step in front) that make ``config.replay.ratio`` updates per collected environment
    step; ConfigError when no whole number of passes does."""
    length, batch_size, ratio = config.sequence_length, config.batch_size, config.replay.ratio
    count = num_sequences(unroll_length + 1, length, max(length - 1, 1)) or 0
    updates_per_pass = count * lanes / batch_size
    passes = ratio * lanes * unroll_length / updates_per_pass if updates_per_pass else 0.0
    if passes >= 1 and abs(passes - round(passes)) < 1e-6:
        return round(passes)
    step = updates_per_pass / (lanes * unroll_length) if updates_per_pass else 0.0
    choices = ", ".join(f"{k * step:g}" for k in (1, 2, 4, 8)) if step else "none"
    raise ConfigError(
        f"{agent}.replay.ratio={ratio:g} updates per collected environment step cannot be made "
        f"from whole unrolls replayed once each (cycle_one_time): a pass over a batch of "
        f"{lanes} unrolls of {unroll_length} steps makes {updates_per_pass:g} updates, so the "
        f"ratio must be a whole multiple of {step:g} (e.g. {choices})"
    )


OFF_POLICY_REPLAYERS = ("uniform", "cycle_one_time")


def off_policy_learning(
    agent: str, config, update: Callable, devices, served: tuple[str, ...] = OFF_POLICY_REPLAYERS
) -> dict:
    """The ``Agent`` fields every off-policy agent fills alike from its one-device
    ``update``: ``update`` (split over ``devices``, default all), ``make_replay``, ``learn``
    and ``replayers``."""
    update = data_parallel(update, devices or jax.devices(), agent, config.batch_size)
    return dict(
        update=update,
        make_replay=lambda num_envs, name=None, **sizes: make_off_policy_replay(
            agent, config, num_envs, name, served, **sizes
        ),
        learn=replay_updates(agent, update, config),
        replayers=served,
    )


def make_off_policy_replay(
    agent: str,
    config,
    num_envs: int,
    name: str | None = None,
    served: tuple[str, ...] = OFF_POLICY_REPLAYERS,
    **sizes,
):
    """The replayer of an off-policy agent (``config`` has ``replay``, ``unroll_length``,
    ``batch_size`` and ``sequence_length``), sized for ``num_envs``; ``sizes`` override
    ``ReplaySizes`` fields (a dataset: its capacity, no minimum, no rate limit). Sequences
    cut from whole unrolls must tile them, and fill whole mini-batches."""
    name = replay.check_name(name or served[0], served, agent)
    fields = dict(
        num_envs=num_envs,
        unroll_length=config.unroll_length,
        batch_size=config.batch_size,
        sequence_length=config.sequence_length,
        capacity=config.replay.capacity,
        min_size=max(config.replay.min_size, config.sequence_length),
        ratio=config.replay.ratio,
    )
    fields.update(sizes)
    sizes = replay.ReplaySizes(**fields)
    made = replay.make_replay(name, sizes)
    if name != "uniform":
        lanes = sizes.learn_queue_cap * (num_envs // sizes.num_actors)
        check_tiling(agent, sizes.unroll_length + 1, lanes, config, overlap=True)
        unroll_passes(agent, config, lanes, sizes.unroll_length)
    return made


def check_tiling(agent: str, steps: int, lanes: int, config, overlap: bool) -> None:
    """Sequences of ``config.sequence_length`` must tile a batch of ``lanes`` x ``steps``
    and give whole mini-batches of ``config.batch_size``."""
    length = config.sequence_length
    stride = max(length - 1, 1) if overlap else length
    count = num_sequences(steps, length, stride)
    if count is None:
        raise ConfigError(
            f"{agent}.sequence_length={length} does not tile unrolls of {steps} steps "
            f"(unroll_length={config.unroll_length}"
            f"{' + 1 bootstrap step' if overlap else ''}): choose unroll_length a multiple "
            f"of {stride}"
        )
    total = count * lanes
    if total % config.batch_size:
        divisors = [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if total % d == 0]
        raise ConfigError(
            f"{agent}.batch_size={config.batch_size} sequences must divide the {total} "
            f"sequences of each batch ({lanes} environments x {count} sequences of {length} "
            f"steps); e.g. {', '.join(map(str, divisors[-4:]))}"
        )


def data_parallel(update: Callable, devices, agent: str, batch_size: int) -> Callable:
    """``update`` split over ``devices`` by sequence (gradients averaged across them with
    ``parallel.device_mean``); unchanged on one device."""
    devices = list(devices)
    if len(devices) <= 1:
        return update
    if batch_size % len(devices):
        raise ConfigError(
            f"{agent}.batch_size={batch_size} sequences per update cannot be shared evenly by "
            f"{len(devices)} devices: choose a multiple of {len(devices)}"
        )
    return parallel.shard_update(update, devices)


class Hyperparameters:
    """An agent's scheduled hyperparameters (heron.schedules over its update counter, or over
    the environment steps collected for those named in ``by_env_steps``), each scaled by a
    multiplier a controller may change between iterations. The multipliers live in the
    agent's state (``state.controls``, 1.0 at first), so they are checkpointed and a resumed
    run continues with the values in effect."""

    def __init__(self, config, names: tuple[str, ...], by_env_steps: tuple[str, ...] = ()):
        self.schedules = {name: as_schedule(getattr(config, name)) for name in names}
        self.by_env_steps = frozenset(by_env_steps)

    def initial_controls(self) -> dict:
        return {name: jnp.ones((), jnp.float32) for name in self.schedules}

    def __call__(self, name: str, step, controls, env_steps=None):
        """The value of ``name`` at update ``step`` (``env_steps`` collected, for those
        indexed by environment steps) under the controls in effect."""
        if name in self.by_env_steps:
            if env_steps is None:
                raise ValueError(f"{name} is scheduled over environment steps: pass env_steps")
            step = env_steps
        return self.schedules[name](step) * controls[name]

    def metrics(self, step, controls, env_steps=None) -> dict:
        """``schedule/<name>``: the values in effect of the hyperparameters that change."""
        return {
            f"schedule/{name}": self(name, step, controls, env_steps)
            for name, schedule in self.schedules.items()
            if not schedule.is_constant
        }


def gradient_metrics(config, networks: dict) -> dict:
    """``grad_norm/<network>`` (``grad_norm`` for the unnamed one) of each ``{network:
    (grads, params)}``; with ``config.summarize_grads_and_vars`` (ALF's) also the norm of
    every variable and of its gradient, ``grads/<network>/<path>`` and
    ``vars/<network>/<path>``."""
    metrics = {}
    for network, (grads, params) in networks.items():
        prefix = f"/{network}" if network else ""
        metrics[f"grad_norm{prefix}"] = optax.tree.norm(grads)
        if not config.summarize_grads_and_vars:
            continue
        for kind, tree in (("grads", grads), ("vars", params)):
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
                name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
                metrics[f"{kind}{prefix}/{name}"] = jnp.sqrt(jnp.sum(jnp.square(leaf)))
    return metrics


OPTIMIZERS: dict[str, Callable] = {}  # a user's optimisers by name: factory() -> direction


def register_optimizer(name: str, factory: Callable) -> None:
    """Makes ``name`` an optimiser any agent can use (``ALGO.optimizer``; Trax's
    policy_and_value_optimizer): ``factory()`` returns the optax transformation of the
    gradients into an update direction (Adam's is ``optax.scale_by_adam()``); the agent
    clips the gradients before it and steps by minus its scheduled learning rate after it.
    Register it again in every process that trains the run (to resume it)."""
    if name == "adam":
        raise ValueError("'adam' is the built-in optimiser; choose another name")
    OPTIMIZERS[name] = factory


def optimizer_names() -> tuple[str, ...]:
    return ("adam", *OPTIMIZERS)


def direction(config, **adam) -> optax.GradientTransformation:
    """``config.optimizer``'s update direction (``adam``: ``optax.scale_by_adam(**adam)``)."""
    if config.optimizer == "adam":
        return optax.scale_by_adam(**adam)
    return OPTIMIZERS[config.optimizer]()


def descend(updates, learning_rate):
    """Optimiser updates (e.g. Adam's direction, ``optax.scale_by_adam``) times the learning
    rate in effect, as gradient descent: ``-learning_rate * updates``."""
    return jax.tree.map(lambda u: -learning_rate * u, updates)


class Optimizer(NamedTuple):
    """An optax transformation into an update direction, stepped by the learning rate in
    effect (``Hyperparameters``: scheduled, scaled by its control): ``init(params)`` and
    ``step(grads, opt_state, params, learning_rate) -> (params, opt_state)``."""

    direction: optax.GradientTransformation

    def init(self, params):
        return self.direction.init(params)

    def step(self, grads, opt_state, params, learning_rate):
        updates, opt_state = self.direction.update(grads, opt_state, params)
        return optax.apply_updates(params, descend(updates, learning_rate)), opt_state


def optimizer(config, **adam) -> Optimizer:
    """An agent's optimiser: the gradients clipped to the global norm
    ``config.max_grad_norm`` (inf: not clipped), then ``direction(config, **adam)``."""
    clip = (
        []
        if math.isinf(config.max_grad_norm)
        else [optax.clip_by_global_norm(config.max_grad_norm)]
    )
    return Optimizer(optax.chain(*clip, direction(config, **adam)))


def target_update(online, target, updates, period: int, tau: float = 1.0):
    """The target parameters after an update: when ``updates % period == 0``, ``target``
    moved ``tau`` of the way to ``online`` (Polyak averaging; ``tau = 1`` copies
    ``online``), else ``target`` unchanged. ``updates`` counts the optimiser steps with this
    one (moves after updates P, 2P, ...) or, as Acme's CRR, without it (after updates 1,
    P + 1, 2P + 1, ...)."""
    moved = online if tau == 1.0 else optax.incremental_update(online, target, tau)
    if period == 1:
        return moved
    return optax.periodic_update(moved, target, updates, period)


def rollout_extras(config, carry) -> dict:
    """What ``act`` records for ``config.use_rollout_state``: the network state before the
    step (``extras[ROLLOUT_STATE]``), from which training sequences start; else nothing."""
    return {ROLLOUT_STATE: carry} if config.use_rollout_state else {}


def start_state(config, agent: str, batch, initial_carry: Callable, t: int = 0):
    """Where the networks start on the sequences of ``batch`` [L, M] when they first see
    step ``t``: under ``config.use_rollout_state`` the states recorded before step ``t``
    (``rollout_extras``), else ``initial_carry(M)``."""
    if config.use_rollout_state:
        recorded = extra(batch, ROLLOUT_STATE, agent, "use_rollout_state")
        return jax.tree.map(lambda x: x[t], recorded)
    return initial_carry(batch.step_type.shape[1])


def restart_masks(is_first):
    """``ops.restart_mask`` over a batch: is_first [T+1, B] -> mask [T, B]."""
    return jax.vmap(ops.restart_mask, in_axes=1, out_axes=1)(is_first)
