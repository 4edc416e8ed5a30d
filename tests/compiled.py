"""Agents for unit tests, with their functions compiled as the driver compiles them, made
once per configuration in a test process.

Called eagerly, an agent's update dispatches op by op (every scan and vmap compiled on its
own): a small CRR update takes about 40 s that way on 2 cores and 8 s under ``jax.jit``.
The values are the driver's either way; only the time differs. Agents are pure functions,
so tests that ask for the same (algorithm, spec, config) share one agent and its compiled
programs: a configuration is traced and compiled once, whichever test asks first.
"""

from __future__ import annotations

import dataclasses
import functools

import jax

from heron import agents
from heron.agents.base import Agent


def compiled(agent: Agent) -> Agent:
    return dataclasses.replace(
        agent,
        init=jax.jit(agent.init),
        act=jax.jit(agent.act),
        policy=jax.jit(agent.policy),
        update=jax.jit(agent.update),
    )


@functools.cache
def make(name: str, spec, config=None, **kwargs) -> Agent:
    """``heron.agents.make`` with ``init``, ``act``, ``policy`` and ``update`` compiled; the
    same agent for the same arguments (configs and specs are frozen dataclasses)."""
    return compiled(agents.make(name, spec, config, **kwargs))
