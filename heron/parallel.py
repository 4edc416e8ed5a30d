"""Data-parallel learning across devices: the learner's batch is split over the devices of
a mesh axis named ``DEVICE_AXIS``, and each agent averages its gradients (and metrics) over
that axis before the optimiser step, so every device applies the same update.

Agents call ``device_mean`` unconditionally: outside a multi-device program the axis is
not bound and it is the identity, so single-device code pays nothing.
"""

from __future__ import annotations

import jax

DEVICE_AXIS = "devices"


def device_mean(tree):
    """The mean of ``tree`` over the devices of the data-parallel learner (identity when the
    learner runs on one device)."""
    try:
        jax.lax.axis_size(DEVICE_AXIS)
    except NameError:  # not inside a multi-device learner
        return tree
    return jax.lax.pmean(tree, DEVICE_AXIS)
