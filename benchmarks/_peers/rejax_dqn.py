"""rejax DQN on gymnax CartPole-v1, one measurement per process.

Runs inside ``benchmarks/.venvs/rejax`` (rejax 0.1.3, gymnax 0.0.9), with the ``dqn``
entry of rejax's ``configs/cartpole.yaml`` (dueling Q network, double DQN, 10 envs).
Modes as in ``rejax_ppo.py``: ``whole`` (compile and train once, no evaluation),
``throughput`` (time a second call of the compiled train function), ``eval`` (greedy
evaluation every ``--eval-every`` env steps; first step reaching ``--solved-return``).

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import dataclasses
import time

_T0 = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import rejax  # noqa: E402
from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402
from rejax.evaluate import evaluate  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0

# The ``dqn`` values of ``configs/cartpole.yaml`` in the rejax GitHub repository
# (keraJLi/rejax); ``total_timesteps`` and ``eval_freq`` are set per run below. Older
# releases call ``gradient_steps`` ``num_epochs``: translated in ``make_algo``.
REJAX_CARTPOLE_DQN = {
    "env": "CartPole-v1",
    "agent": "DuelingQNetwork",
    "agent_kwargs": {"activation": "swish"},
    "num_envs": 10,
    "buffer_size": 50_000,
    "fill_buffer": 5_000,
    "batch_size": 100,
    "max_grad_norm": 10,
    "learning_rate": 0.001,
    "gradient_steps": 5,
    "target_update_freq": 200,
    "eps_start": 1,
    "eps_end": 0.05,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
    "ddqn": True,
    "normalize_observations": False,
}


def rejax_config() -> dict:
    """The config in the field names of the installed rejax (unknown fields dropped)."""
    fields = {f.name for f in dataclasses.fields(rejax.DQN)}
    config = dict(REJAX_CARTPOLE_DQN)
    if "gradient_steps" not in fields and "num_epochs" in fields:
        config["num_epochs"] = config.pop("gradient_steps")
    keep = {"env", "agent", "agent_kwargs"}
    return {k: v for k, v in config.items() if k in fields or k in keep}


def update_work() -> dict:
    cfg = REJAX_CARTPOLE_DQN
    return {"updates_per_1k_steps": 1000 * cfg["gradient_steps"] / cfg["num_envs"]}


def no_eval(algo, ts, rng):
    return jnp.zeros(())


def greedy_eval(episodes: int):
    def callback(algo, ts, rng):
        act = algo.make_act(ts)  # rejax's evaluation policy (epsilon 0.005)
        max_steps = algo.env_params.max_steps_in_episode
        _, returns = evaluate(act, rng, algo.env, algo.env_params, episodes, max_steps)
        return ts.global_step, returns.mean(), returns.std()

    return callback


def make_algo(steps: int, eval_every: int, callback):
    config = dict(rejax_config(), total_timesteps=steps, eval_freq=eval_every)
    algo = rejax.DQN.create(skip_initial_evaluation=True, **config)
    return algo.replace(eval_callback=callback)


def timed_call(fn, key):
    start = time.perf_counter()
    out = jax.block_until_ready(fn(key))
    return out, time.perf_counter() - start


def run_whole(args) -> dict:
    start = time.perf_counter()
    algo = make_algo(args.steps, args.steps, no_eval)
    key = jax.random.PRNGKey(args.seed)
    create_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = jax.jit(algo.train).lower(key).compile()
    compile_s = time.perf_counter() - start
    (ts, _), run_s = timed_call(compiled, key)
    steps = int(ts.global_step)
    return {"steps": steps, "create_s": create_s, "compile_s": compile_s, "run_s": run_s}


def run_throughput(args) -> dict:
    algo = make_algo(args.steps, args.steps, no_eval)
    key = jax.random.PRNGKey(args.seed)
    train = jax.jit(algo.train)
    _, first_s = timed_call(train, key)
    (ts, _), second_s = timed_call(train, key)
    steps = int(ts.global_step)
    return {
        "steps": steps,
        "first_call_s": first_s,
        "second_call_s": second_s,
        "steps_per_s": steps / second_s,
    }


def run_eval(args) -> dict:
    algo = make_algo(args.steps, args.eval_every, greedy_eval(args.eval_episodes))
    key = jax.random.PRNGKey(args.seed)
    (ts, (steps, means, stds)), seconds = timed_call(jax.jit(algo.train), key)
    evals = [
        {"step": int(s), "return_mean": float(m), "return_std": float(d)}
        for s, m, d in zip(steps.tolist(), means.tolist(), stds.tolist(), strict=True)
    ]
    return {
        "steps": int(ts.global_step),
        "wall_s_in_process": seconds,
        "eval_episodes": args.eval_episodes,
        "evals": evals,
        "steps_to_solved": first_step_reaching(evals, args.solved_return),
        "final_eval_return": evals[-1]["return_mean"] if evals else None,
    }


MODES = {"whole": run_whole, "throughput": run_throughput, "eval": run_eval}


def main() -> None:
    args = base_parser(__doc__.splitlines()[0], MODES).parse_args()
    result = MODES[args.mode](args)
    emit(
        {
            "system": "rejax",
            "mode": args.mode,
            "seed": args.seed,
            "import_s": _IMPORT_S,
            "process_s": time.perf_counter() - _T0,
            "config": rejax_config(),
            "versions": package_versions("rejax", "gymnax", "jax", "jaxlib", "flax", "optax"),
            **update_work(),
            **result,
        }
    )


if __name__ == "__main__":
    main()
