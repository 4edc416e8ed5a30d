"""A learner on GPUs (``--dist.learner-gpus G``): the whole run (driver, replay, the agent's
data-parallel learner over the G GPUs Ray gives it) moves into one Ray actor, which starts
the CPU actors itself. The calling process waits for the final summary; the run directory
must be reachable from the learner's node (the same machine, or a shared filesystem)."""

from __future__ import annotations

import os

from heron.distributed import cluster

_INSIDE = "HERON_INSIDE_LEARNER"  # set in the learner actor's environment


def inside() -> bool:
    """Whether this process is the learner actor."""
    return os.environ.get(_INSIDE) == "1"


class Learner:
    """The body of the learner actor."""

    def run(self, gpus: int, work) -> dict:
        """Checks that JAX here sees ``gpus`` GPUs, then runs ``work()`` (the run's training
        or resumption, handed over by heron.api)."""
        import jax

        found = [d for d in jax.devices() if d.platform == "gpu"]
        if len(found) < gpus:
            raise cluster.RayUnavailableError(
                f"dist.learner_gpus={gpus}, but JAX in the learner actor sees {len(found)} "
                f"GPUs ({jax.devices()[0].platform} devices): install jax with CUDA support "
                "on the GPU nodes"
            )
        return work()


def run(run, work) -> dict:
    """Runs ``work()`` (a picklable call that trains or resumes ``run``) in a learner actor
    with ``run.dist.learner_gpus`` GPUs."""
    gpus = run.dist.learner_gpus
    connected = cluster.connect(run.ray_address, run.actors + 1)
    import ray

    try:
        available = ray.cluster_resources().get("GPU", 0)
        if available < gpus:
            raise cluster.RayUnavailableError(
                f"dist.learner_gpus={gpus} needs {gpus} GPUs; the Ray cluster has {available:g}"
            )
        learner = (
            ray.remote(Learner)
            .options(num_gpus=gpus, num_cpus=1, runtime_env={"env_vars": {_INSIDE: "1"}})
            .remote()
        )
        try:
            return ray.get(learner.run.remote(gpus, work))
        except ray.exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, ValueError | RuntimeError):
                raise cause from None
            raise
        finally:
            ray.kill(learner)
    finally:
        if connected:
            cluster.disconnect()
