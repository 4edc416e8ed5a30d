"""The checks of a run's Ray actor options (``--actors``, ``--ray-address``, ``--dist.*``,
declared in ``heron.run_config``): the ``actors`` source of ``heron.sources``. Imports
nothing of Ray's or of the actors' code, which ``heron.distributed`` loads when a run asks
for actors."""

from __future__ import annotations

from heron import sources
from heron.configs import ConfigError
from heron.run_config import SYNC, DistConfig


def check_actor_options(run) -> None:
    """The run options of Ray actors, checked together (one line each)."""
    dist = run.dist
    if run.actors == 0:
        if run.ray_address is not None or dist != DistConfig():
            given = "--ray-address" if run.ray_address is not None else "--dist.* options"
            raise ConfigError(f"{given} configure Ray actors: add --actors A (A >= 1)")
        return
    if run.seeds > 1:
        raise ConfigError(
            f"seeds={run.seeds} vmaps runs in one process; actors={run.actors} collect "
            "for one run: use seeds=1 with actors"
        )
    if run.num_envs % run.actors:
        raise ConfigError(
            f"num_envs={run.num_envs} must be a multiple of actors={run.actors}: every "
            "actor steps the same number of environments"
        )
    if run.ray_address is not None and not run.ray_address.strip():
        raise ConfigError("ray_address must be host:port or auto, got an empty string")
    if dist.driver == SYNC:
        for name in ("learn_queue_cap", "max_policy_lag"):
            if getattr(dist, name) != getattr(DistConfig(), name):
                raise ConfigError(
                    f"dist.{name} sets the asynchronous driver: add --dist.driver async"
                )
        return
    if dist.policy_lag:
        raise ConfigError(
            "dist.policy_lag sets the synchronous driver's overlap; the asynchronous driver "
            "measures the lag instead (bound it with --dist.max-policy-lag)"
        )
    if dist.learn_queue_cap > run.actors:
        raise ConfigError(
            f"dist.learn_queue_cap={dist.learn_queue_cap} must be <= actors={run.actors}: "
            "each actor has one unroll waiting at most"
        )
    if run.replay not in (None, "cycle_one_time"):
        raise ConfigError(
            f"the asynchronous driver hands unrolls to the learner through the "
            f"cycle_one_time replayer; replay={run.replay!r} cannot serve it: drop --replay "
            "or use --replay cycle_one_time"
        )


def _make(request: sources.Request):
    from heron import distributed

    return distributed.make_source(request)


sources.register(
    sources.SourceKind("actors", lambda run: run.actors > 0, check_actor_options, _make)
)
