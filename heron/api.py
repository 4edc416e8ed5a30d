"""heron from Python: build a run, train it, resume it, load its policy, evaluate it,
collect data from it.

    import heron
    setup = heron.build("ppo", run=heron.RunConfig(env="gymnax:CartPole-v1"))
    summary = heron.train(setup, "runs/cartpole")      # the final JSON line's fields
    summary = heron.resume("runs/cartpole", steps=200_000)   # continue, to a new budget
    policy = heron.load("runs/cartpole")               # action = policy(observation): heron.policy

``build`` makes the source of experience the run configuration asks for (``heron.sources``):
environments (JAX envs compiled whole, Gymnasium envs through host callbacks), with
``actors``, Ray actor processes stepping them (heron.distributed), or, with ``dataset``, a
Minari dataset (offline training; the environment only evaluates).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys

import jax
import numpy as np

from heron import agents, envs, presets, sources, transfer
from heron.agents.base import Agent
from heron.configs import ConfigError
from heron.envs.errors import EnvironmentRaised
from heron.envs.gym_env import GymEnv
from heron.envs.wrappers import ObservationPipeline
from heron.offline import collect as collecting
from heron.offline.dataset import check_writable, gym_spaces, write_dataset
from heron.parallel import SEED_AXIS
from heron.run_config import RunConfig
from heron.training import checkpoints, driver, rundir, signals
from heron.training.driver import Setup, TrainingError, seed_keys
from heron.training.evaluation import make_evaluate, make_scoring
from heron.training.signals import RunInterrupted

OBSERVERS_NEED_STEPS = "observers see the steps a run collects; a run on a dataset collects none"


def _check_seeds(run: RunConfig, env) -> None:
    if run.seeds > 1 and not env.is_jax:
        forms = " or ".join(envs.jax_native_forms())
        raise ConfigError(
            f"seeds={run.seeds} needs a JAX environment ({forms}) to vmap the runs into one "
            f"program; {run.env!r} steps on the host: use seeds=1"
        )


# The options of an evaluation in the environment, which a model scored on held-out data
# would ignore.
ENVIRONMENT_EVALUATION = ("n_evals", "eval_temperatures", "max_timestep_eval")


def _return_discount(algo: str, agent_config, run: RunConfig) -> float:
    """The discount of the returns ``normalize_rewards`` divides rewards by: the agent's own
    (SB3's VecNormalize is given the agent's gamma), which must then be a number."""
    if not run.normalize_rewards:
        return ObservationPipeline.discount
    discount = agent_config.discount
    if not isinstance(discount, int | float):
        raise ConfigError(
            f"normalize_rewards divides rewards by the spread of returns discounted by "
            f"{algo}.discount, which is scheduled ({discount!r}): give it a number"
        )
    return float(discount)


def _evaluation(agent: Agent, run: RunConfig, pipeline: ObservationPipeline, source):
    """In the environment, or, for a model without a policy, its score on the source's
    held-out steps; None where training episodes stand for the evaluation."""
    if agent.scoring is not None:
        default = RunConfig()
        for option in ENVIRONMENT_EVALUATION:
            if getattr(run, option) != getattr(default, option):
                raise ConfigError(
                    f"{option}={getattr(run, option)!r} sets the evaluation in the environment; "
                    f"{agent.name} has no policy to evaluate there (it is scored on held-out "
                    "episodes of its dataset): remove the option"
                )
        return make_scoring(agent, source.held_out_steps, pipeline)
    if not run.separate_eval:
        return None  # training episodes stand for the evaluation
    groups = len(run.eval_temperatures)
    eval_env = envs.make(run.env, run.n_evals * groups, run.max_timestep_eval, envs.options_of(run))
    return make_evaluate(agent, eval_env, run.eval_temperatures, pipeline, SEED_AXIS)


def build(
    algo: str,
    agent_config=None,
    run: RunConfig | None = None,
    controller=None,
    program_cache: str | None = None,
    observers=(),
) -> Setup:
    """Validates and builds a run: source, agent, replay, evaluation. Writes nothing.
    ``controller``: any callable ``history -> {hyperparameter: multiplier}`` called at each
    evaluation (see heron/training/controllers.py; ``run.controller`` names a built-in).
    ``observers`` (ALF's observers and step metrics): callables given every step the run
    collects, after each iteration, once per seed, as ``Experience`` of numpy arrays
    [lanes, T, ...] (time in order within each lane, FIRST steps included, observations as
    the replay keeps them); a returned ``{name: number}`` is logged with that iteration as
    ``metrics/<name>`` (metrics.jsonl, TensorBoard). Their cost: the steps' copy to the
    host each iteration, your function's time, and a program compiled apart from the
    program cache's.
    ``program_cache``: a directory where the run's programs are exported for later runs of
    the same configuration, which load them instead of tracing them
    (heron/training/program_cache.py); only runs made of heron's and its libraries' code
    use it (a JAX environment of gymnax or heron, one device, no actors, dataset, env
    module or init_from). The CLI keeps it in its compilation cache."""
    config_type = agents.config_class(algo)  # an unknown algorithm: a clear error first
    agent_config = config_type() if agent_config is None else agent_config
    run = RunConfig() if run is None else run
    if run.preset == presets.AUTO:  # from Python a preset is explicit: heron.presets.preset()
        run = dataclasses.replace(run, preset=presets.NONE)
    envs.import_env_module(run.env_module)  # its registrations make the env id resolve
    kind = sources.asked_for(run)
    if observers and not kind.collects:
        raise ConfigError(OBSERVERS_NEED_STEPS)
    if kind.collects:
        env = envs.make(run.env, run.num_envs, run.max_timestep, envs.options_of(run))
    else:  # it only evaluates
        env = envs.make(run.env, 1, run.max_timestep_eval, envs.options_of(run))
    _check_seeds(run, env)
    pipeline = ObservationPipeline(
        env.spec,
        run.normalize_observations,
        run.len_history_for_policy,
        run.reward_scale,
        normalize_rewards=run.normalize_rewards,
        discount=_return_discount(algo, agent_config, run),
        clip_rewards=run.clip_rewards,
    )
    agent = agents.make(algo, pipeline.spec, agent_config, collects=kind.collects)
    if kind.collects and agent.act is None:
        raise ConfigError(
            f"{algo} is a model without a policy: it cannot act in {run.env!r} to collect "
            "experience; it learns from a dataset: give --dataset DIR (`heron collect` "
            "writes one)"
        )
    agent, record = _initialised_from(agent, run.init_from)
    source = kind.make(sources.Request(algo, agent_config, agent, env, pipeline, run))
    frames = {"frame_history": pipeline.history} if pipeline.stacks_frames else {}
    replay = agent.make_replay(
        source.lanes, source.replayer or run.replay, **source.replay_sizes, **frames
    )
    evaluate = _evaluation(agent, run, pipeline, source)
    return driver.make_setup(
        algo,
        agent_config,
        run,
        agent,
        replay,
        source,
        evaluate,
        {**record, **source.record},
        controller,
        program_cache if _cacheable(run, env) else None,
        observers,
    )


def _cacheable(run: RunConfig, env) -> bool:
    """Whether the run's programs are pure JAX computations of heron's and its pinned
    libraries' code, which the program cache's key captures (a user's module, Gymnasium's
    host callbacks, Ray actors, several devices or another run's parameters it cannot)."""
    return (
        env.is_jax
        and envs.is_builtin(run.env)
        and run.env_module is None
        and not run.actors
        and run.init_from is None
        and jax.device_count() == 1
    )


def source_parameters(run_dir: str):
    """The agent state of ``run_dir``'s latest checkpoint (its first seed)."""
    _, _, state, _ = load_run(run_dir)
    return jax.tree.map(lambda x: x[0], state.agent_state)


def _initialised_from(agent: Agent, init_from: str | None):
    """``agent`` whose ``init`` copies every parameter of ``init_from``'s latest checkpoint
    whose path and shape match (said on stderr and recorded in config.json)."""
    if init_from is None:
        return agent, {}
    source = source_parameters(init_from)
    shapes = jax.eval_shape(agent.init, jax.random.PRNGKey(0))
    plan = transfer.plan(shapes, source)
    if not plan.copied:
        raise transfer.TransferError(
            f"nothing in {init_from!r} matches {agent.name}'s parameters by path and shape "
            f"({len(plan.fresh)} parameters, e.g. {'/'.join(plan.fresh[0]) if plan.fresh else '-'})"
        )
    summary = plan.summary(init_from)
    print(
        f"heron: initialised from {init_from!r}: {summary['copied']} parameters copied, "
        f"{summary['fresh']} initialised afresh",
        file=sys.stderr,
    )
    original = agent.init
    source = jax.device_put(source)

    def init(key):
        return transfer.apply(original(key), source, plan)

    return dataclasses.replace(agent, init=init), {"init_from": summary}


def train(setup: Setup, run_dir: str | None = None) -> dict:
    """Runs ``setup`` to its configured steps in ``run_dir`` (default: the run's own, or
    runs/<algo>_<env>_<time>); returns the final JSON line's fields."""
    run_dir = run_dir or setup.run.run_dir or rundir.default_run_dir(setup.algo, setup.run.env)
    if _on_gpu_learner(setup):
        from heron.distributed import learner

        work = functools.partial(
            _train_built, setup.algo, setup.agent_config, setup.run, os.path.abspath(run_dir)
        )
        return learner.run(setup.run, work)
    with _source_running(setup, run_dir):
        return driver.train(setup, run_dir)


def _train_built(algo, agent_config, run, run_dir: str) -> dict:
    """Builds and trains a run (in the learner actor, where the build happens again)."""
    return train(build(algo, agent_config, run), run_dir)


def _on_gpu_learner(setup: Setup) -> bool:
    """Whether this process hands the run to a learner in its own Ray actor with GPUs."""
    if not (setup.run.actors and setup.run.dist.learner_gpus):
        return False
    from heron.distributed import learner

    return not learner.inside()


@contextlib.contextmanager
def _source_running(setup: Setup, run_dir: str):
    """A source with processes of its own (Ray actors) starts before the run writes
    anything and stops after it; a failure it reports from inside the compiled iteration
    (an actor's, or what a Gymnasium environment raised) is raised as its own one-line
    error."""
    GymEnv.take_failure()  # none of an earlier run's
    try:
        setup.source.start()
        yield
    except jax.errors.JaxRuntimeError:
        failure = setup.source.failure or GymEnv.take_failure()
        if isinstance(failure, EnvironmentRaised):
            saved = checkpoints.latest_step(run_dir) if os.path.isdir(run_dir) else None
            kept = (
                f"its last checkpoint ({saved}) is kept"
                if saved is not None
                else "it had saved no checkpoint yet"  # fmt: skip
            )
            raise TrainingError(f"{failure}; training stopped, {kept}") from None
        if failure is not None:
            raise failure from None
        raise
    finally:
        setup.source.close()


RECORD_SECTIONS = ("algo", "run", "heron_version", "init_from", "dataset")  # + the agent's


def configs_from_record(record: dict, where: str, algo: str | None = None):
    """(algo, agent config, RunConfig) of a config record: config.json's layout, ``{"algo":
    NAME, "run": {...}, NAME: {...}}`` (``algo`` names the agent where the record does not).
    Unknown sections and unknown or renamed fields are refused by name."""
    if not isinstance(record, dict):
        raise rundir.RunDirError(f"{where}: expected a mapping with algo, run and agent fields")
    named = record.get("algo", algo)
    if named is None:
        raise rundir.RunDirError(
            f"{where!r} names no algorithm: add algo = NAME (one of "
            f"{', '.join(sorted(agents.REGISTRY))}) or give ALGO on the command line"
        )
    config_type = agents.config_class(named)
    unknown = sorted(set(record) - {*RECORD_SECTIONS, named})
    if unknown:
        raise rundir.RunDirError(
            f"{where!r} has unknown section{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}: a {named} config has algo, run and {named} "
            f"(and a run's own {', '.join(RECORD_SECTIONS[2:])})"
        )
    try:
        renamed = getattr(config_type, "renamed_fields", None)
        agent_config = rundir.config_from_record(config_type, record.get(named, {}), where, renamed)
        run = rundir.config_from_record(RunConfig, record.get("run", {}), where)
    except (KeyError, TypeError) as error:
        raise rundir.RunDirError(f"{where!r} is unreadable: {error!r}") from error
    return named, agent_config, run


def read_config_file(path: str) -> dict:
    """A config record from a TOML, YAML or JSON file (config.json's layout)."""
    import json
    import tomllib

    import yaml

    readers = {
        ".toml": lambda f: tomllib.loads(f.read()),
        ".yaml": yaml.safe_load,
        ".yml": yaml.safe_load,
        ".json": json.load,
    }
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in readers:
        raise rundir.RunDirError(
            f"config file {path!r}: unknown format {suffix or '(no suffix)'}; use .toml, .yaml "
            "or .json (a run's config.json repeats the run)"
        )
    try:
        with open(path) as f:
            return readers[suffix](f)
    except FileNotFoundError:
        raise rundir.RunDirError(f"config file {path!r} does not exist") from None
    except (ValueError, yaml.YAMLError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise rundir.RunDirError(f"config file {path!r} is unreadable: {first}") from error


def load_config(run_dir: str):
    """(algo, agent config, RunConfig) recorded in ``run_dir``."""
    record = rundir.read_config(run_dir)
    return configs_from_record(record, os.path.join(run_dir, rundir.CONFIG))


def resume(
    run_dir: str,
    steps: int | None = None,
    controller=None,
    program_cache: str | None = None,
    observers=(),
) -> dict:
    """Continues ``run_dir`` from its latest checkpoint to its configured ``steps`` (or to a
    new budget ``steps``). With JAX environments on CPU the result equals the uninterrupted
    run's. ``program_cache`` and ``observers``: as ``build``'s."""
    changes = {} if steps is None else {"steps": steps}
    setup = _rebuild(run_dir, controller, program_cache, **changes)
    if observers and not setup.source.collects:
        raise ConfigError(OBSERVERS_NEED_STEPS)
    setup = dataclasses.replace(setup, observers=driver.check_observers(observers))
    _check_same_dataset(run_dir, setup)
    if _on_gpu_learner(setup):
        from heron.distributed import learner

        return learner.run(setup.run, functools.partial(resume, os.path.abspath(run_dir), steps))
    with _source_running(setup, run_dir):
        return driver.continue_run(setup, run_dir, rewrite_config=steps is not None)


def _rebuild(run_dir: str, controller=None, program_cache=None, **run_changes) -> Setup:
    """The setup of a recorded run whose checkpoint will be restored: the parameters it was
    initialised from are in that checkpoint, so the run they came from is not read again."""
    algo, agent_config, run = load_config(run_dir)
    run = dataclasses.replace(run, init_from=None, **run_changes)
    setup = build(algo, agent_config, run, controller, program_cache)
    recorded = rundir.read_config(run_dir)
    if "init_from" in recorded:
        setup.record["init_from"] = recorded["init_from"]
        setup.record["run"]["init_from"] = recorded["run"].get("init_from")
    return setup


def _check_same_dataset(run_dir: str, setup: Setup) -> None:
    """An offline run resumes only on the data it started with."""
    recorded = rundir.read_config(run_dir).get("dataset")
    now = setup.record.get("dataset")
    if recorded is not None and recorded != now:
        raise ConfigError(
            f"dataset {setup.run.dataset!r} changed since {run_dir!r} started: it held "
            f"{recorded}, it now holds {now}"
        )


def load_run(run_dir: str, best: bool = False, **run_changes):
    """(setup, program, state, checkpoint) of the latest checkpoint of ``run_dir`` (``best``:
    of its best greedy evaluation), its run configuration changed by ``run_changes`` (e.g.
    ``n_evals``); states carry the seed axis."""
    setup = _rebuild(run_dir, **run_changes)
    kind = checkpoints.BEST if best else checkpoints.LATEST
    program, state, step = driver.restore(setup, run_dir, kind)
    return setup, program, state, step


def check_has_policy(run_dir: str, what: str) -> None:
    """A run of a model without a policy (the world model) has none to ``what``; told
    before anything is restored."""
    algo, agent_config, run = load_config(run_dir)
    envs.import_env_module(run.env_module)
    agent = agents.make(algo, envs.make(run.env, 1, None, envs.options_of(run)).spec, agent_config)
    if agent.policy is None:
        raise rundir.RunDirError(
            f"{run_dir!r} trained {algo}, a model without a policy: it has none to {what}; "
            "plot it, or initialise a policy from it with --init-from"
        )


def evaluate_run(run_dir: str, episodes: int, temperature: float, best: bool = False) -> dict:
    """Evaluates the latest checkpoint of ``run_dir`` (``best``: the best one); returns the
    JSON line's fields (with several seeds: the mean over seeds, and ``per_seed``)."""
    check_has_policy(run_dir, "evaluate")
    setup, program, state, step = load_run(
        run_dir, best, n_evals=episodes, eval_temperatures=(temperature,), separate_eval=True
    )
    run = setup.run
    returns = np.asarray(program.evaluate(state, seed_keys(setup.seeds, 2)))[:, 0]
    params = setup.agent.params(state.agent_state)
    per_seed = [jax.tree.map(lambda x, k=k: x[k], params) for k in range(run.seeds)]
    result = {
        "run_dir": run_dir,
        "checkpoint": step,
        "best": best,
        "steps": step * setup.steps_per_iteration,
        "temperature": temperature,
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "episodes": episodes,
        "params_digest": rundir.params_digest(per_seed[0] if run.seeds == 1 else params),
    }
    if run.seeds > 1:
        result["per_seed"] = [
            {
                "seed": seed,
                "return_mean": float(r.mean()),
                "return_std": float(r.std()),
                "params_digest": rundir.params_digest(p),
            }
            for seed, r, p in zip(setup.seeds, returns, per_seed, strict=True)
        ]
    return result


def collect(
    run_dir: str,
    episodes: int,
    out: str,
    temperature: float | None = None,
    epsilon: float = 0.0,
    seed: int = 0,
    best: bool = False,
) -> dict:
    """Rolls out the latest checkpoint of ``run_dir`` (``best``: the best one) for
    ``episodes`` episodes and writes them as a Minari dataset at ``out``; returns the JSON
    line's fields."""
    if episodes <= 0:
        raise collecting.CollectError(f"episodes must be > 0, got {episodes}")
    if temperature is not None and not 0 <= temperature < float("inf"):
        raise collecting.CollectError(f"temperature must be finite and >= 0, got {temperature}")
    if not 0.0 <= epsilon <= 1.0:
        raise collecting.CollectError(f"epsilon must be in [0, 1], got {epsilon}")
    check_writable(out)  # before the rollouts, not after
    check_has_policy(run_dir, "roll out")
    setup, _, state, checkpoint = load_run(run_dir, best)
    run, pipeline = setup.run, setup.source.pipeline
    if pipeline.env_spec.action_mask:
        raise collecting.CollectError(
            f"{run.env} gives action masks, which datasets do not keep yet: collecting its "
            "episodes is not supported"
        )
    first_seed = jax.tree.map(lambda x: x[0], state)
    agent_state = first_seed.agent_state
    observations = setup.source.observations(first_seed.source_state)
    policy_step = collecting.make_policy_step(setup.agent, pipeline, temperature, epsilon)
    with signals.StopRequests() as stops:
        collected, returns = collecting.collect_episodes(
            lambda n: envs.make(run.env, n, run.max_timestep, envs.options_of(run)),
            setup.agent,
            pipeline,
            agent_state,
            observations,
            episodes,
            policy_step,
            jax.random.PRNGKey(seed),
            stop=lambda: stops.signal_number is not None,
        )
    if stops.signal_number is not None:
        raise RunInterrupted(
            f"{stops.name} after {len(collected)} of {episodes} episodes: no dataset was "
            f"written to {out!r}",
            stops.signal_number,
        )
    observation_space, action_space = gym_spaces(pipeline.env_spec)
    write_dataset(
        out,
        collected,
        observation_space,
        action_space,
        metadata={
            "algorithm_name": f"heron {setup.algo}",
            "heron_env": run.env,
            "heron_run_dir": os.path.abspath(run_dir),
            "heron_checkpoint": int(checkpoint),
            "heron_temperature": temperature,
            "heron_epsilon": epsilon,
            "heron_seed": seed,
        },
    )
    return {
        "out": out,
        "episodes": len(collected),
        "steps": int(sum(e.num_steps for e in collected)),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "run_dir": run_dir,
        "checkpoint": int(checkpoint),
        "env": run.env,
        "temperature": temperature,
        "epsilon": epsilon,
        "extras": sorted(collected[0].extras),
    }


__all__ = [
    "RunConfig",
    "Setup",
    "TrainingError",
    "build",
    "checkpoints",
    "collect",
    "evaluate_run",
    "load_config",
    "load_run",
    "resume",
    "train",
]
