"""Data-parallel learning across devices: the learner's batch is split over the devices of
a mesh axis named ``DEVICE_AXIS``, and each agent averages its gradients (and metrics) over
that axis before the optimiser step, so every device applies the same update.

Agents call ``device_mean`` unconditionally: outside a multi-device program the axis is
not bound and it is the identity, so single-device code pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

DEVICE_AXIS = "devices"
SEED_AXIS = "seeds"  # the vmapped axis of a run's independent seeds (heron.training.program)


def device_mean(tree):
    """The mean of ``tree`` over the devices of the data-parallel learner (identity when the
    learner runs on one device)."""
    try:
        jax.lax.axis_size(DEVICE_AXIS)
    except NameError:  # not inside a multi-device learner
        return tree
    return jax.lax.pmean(tree, DEVICE_AXIS)


def over_seeds(fn: Callable, in_axes=0) -> Callable:
    """``jax.vmap(fn, in_axes, axis_name=SEED_AXIS)`` over a run's seeds, but a run of one
    seed calls ``fn`` once on that seed's values (the axis taken off the arguments, put
    back on the results). Under a vmap, even of one seed, MJX's step (already vmapped over
    the envs) ran at half speed: a Playground PPO unroll took 0.63 s instead of 0.30."""
    vmapped = jax.vmap(fn, in_axes=in_axes, axis_name=SEED_AXIS)

    def call(*args):
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        batched = [arg for arg, axis in zip(args, axes, strict=True) if axis == 0]
        if {leaf.shape[0] for leaf in jax.tree.leaves(batched)} != {1}:
            return vmapped(*args)
        one = [
            jax.tree.map(lambda x: x[0], arg) if axis == 0 else arg
            for arg, axis in zip(args, axes, strict=True)
        ]
        return jax.tree.map(lambda x: x[None], fn(*one))

    return call


def same_for_all_seeds(x):
    """``x``, a value every seed of the run holds alike (a count of updates, whether the
    replay can sample: the seeds collect and update in lockstep), as one value for them
    all. A ``lax.cond`` on it then runs one branch, and a ``while_loop`` on it stays a
    loop; on a per-seed value, ``vmap`` over the seeds would run both branches and select,
    or select every carried array at every pass. ``x`` itself where no seeds are
    vmapped."""
    try:
        jax.lax.axis_size(SEED_AXIS)
    except NameError:  # not inside the seeds' vmap
        return x
    if x.dtype == jnp.bool_:
        return jax.lax.pmax(x.astype(jnp.int32), SEED_AXIS) > 0
    return jax.lax.pmax(x, SEED_AXIS)


def masked_mean(x, mask):
    """This device's share of the masked mean of ``x`` over the whole batch: its own masked
    sum over the mean count per device, so that ``device_mean`` of it (and of its gradient)
    is the masked mean over all devices' data. On one device, the plain masked mean."""
    return jnp.sum(x * mask) / jnp.maximum(device_mean(jnp.sum(mask)), 1.0)


def example_keys(key, local_size: int):
    """One key per example of this device's share of a batch [local_size], derived from the
    example's index in the whole batch: random draws do not depend on how many devices the
    batch is split over."""
    try:
        offset = jax.lax.axis_index(DEVICE_AXIS) * local_size
    except NameError:  # one device: the share is the whole batch
        offset = 0
    indices = offset + jnp.arange(local_size)
    return jax.vmap(lambda index: jax.random.fold_in(key, index))(indices)


def shard_update(update: Callable, devices) -> Callable:
    """``update(state, batch [L, M], key) -> (state, metrics)`` run data-parallel: the M
    sequences are split evenly over ``devices``; the state and the key are replicated. The
    update must ``device_mean`` its gradients and metrics, which keeps the state identical
    on every device."""
    mesh = jax.sharding.Mesh(np.asarray(devices), (DEVICE_AXIS,))
    replicated, by_sequence = P(), P(None, DEVICE_AXIS)
    return jax.shard_map(
        update,
        mesh=mesh,
        in_specs=(replicated, by_sequence, replicated),
        out_specs=(replicated, replicated),
        check_vma=False,
    )
