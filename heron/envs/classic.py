"""Variants of classic-control environments that heron ships (``heron:<id>``)."""

from __future__ import annotations

import jax.numpy as jnp

from heron.envs.adapters import import_gymnax

_gymnax = import_gymnax()  # not `import gymnax`: that loads its drawing libraries (seconds)
spaces = _gymnax.environments.spaces
CartPole = _gymnax.environments.classic_control.cartpole.CartPole


class MaskedCartPole(CartPole):
    """CartPole-v1 with the velocities hidden: observations are (cart position, pole angle).

    Only partially observed, so a memoryless policy cannot tell which way the pole moves; a
    recurrent policy (or a history of observations) can.
    """

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.x, state.theta])

    def observation_space(self, params):
        full = super().observation_space(params)
        visible = jnp.array([0, 2])
        return spaces.Box(full.low[visible], full.high[visible], (2,), jnp.float32)


def masked_cartpole():
    env = MaskedCartPole()
    return env, env.default_params
