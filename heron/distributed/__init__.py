"""Actors on Ray: ALF's synchronous and asynchronous drivers across processes and machines.

    heron train ppo --actors 4                        # a local Ray instance on 127.0.0.1
    heron train ppo --actors 8 --ray-address HOST:6379 --dist.driver async

A run that asks for actors (``RunConfig.actors > 0``) gets the ``actors`` source of
``heron.sources`` (``options.py``: the checks of its options): a ``RaySource``
(``source.py``) feeding the same driver, agents and replayers, with experience collected by
Ray actor processes (``worker.py``) that the learner's ``ActorPool`` (``pool.py``: the actors
and their faults in ``actors.py``, the synchronous and asynchronous drivers in
``drivers.py``) starts, feeds with parameters, waits for, and restores after failures. With
``dist.learner_gpus`` the learner itself runs in a Ray actor with GPUs (``learner.py``).
Every run imports ``options.py``; the rest loads when a run asks for actors, and Ray itself
only when it starts (``cluster.py``).
"""

from __future__ import annotations

import importlib
import os
import sys

from heron.sources import Request

# Loaded on first use: ``heron.distributed.options`` (imported by every run configuration)
# must not bring in the actors' code, which imports the training driver.
_LAZY = {
    "RayUnavailableError": "heron.distributed.cluster",
    "require_ray": "heron.distributed.cluster",
    "ActorFailure": "heron.distributed.pool",
    "ActorPool": "heron.distributed.pool",
    "RaySource": "heron.distributed.source",
    "RaySourceState": "heron.distributed.source",
    "WorkerSpec": "heron.distributed.worker",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'heron.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def make_source(request: Request):
    """The run's actors as a source (nothing starts until the run does)."""
    import jax

    from heron import envs
    from heron.distributed.pool import ActorPool
    from heron.distributed.source import RaySource
    from heron.distributed.worker import WorkerSpec

    algo, agent_config, run = request.algo, request.agent_config, request.run
    env, pipeline = request.env, request.pipeline
    compile_cache = jax.config.jax_compilation_cache_dir
    spec = WorkerSpec(
        algo=algo,
        agent_config=agent_config,
        env=run.env,
        env_module=run.env_module,
        envs_per_actor=run.num_envs // run.actors,
        max_timestep=run.max_timestep,
        env_options=envs.options_of(run),
        pipeline=pipeline,
        compile_cache=compile_cache or None,
        python_path=(os.getcwd(), *(path for path in sys.path if path)),
    )
    pool = ActorPool(spec, run.actors, run.dist, run.ray_address, env.is_jax)
    return RaySource(env, pipeline, request.agent.unroll_length, run.actors, run.dist, pool)


__all__ = [
    "ActorFailure",
    "ActorPool",
    "RaySource",
    "RaySourceState",
    "RayUnavailableError",
    "WorkerSpec",
    "make_source",
    "require_ray",
]
