"""rejax PPO on gymnax CartPole-v1 or Breakout-MinAtar, one measurement per process.

Runs inside ``benchmarks/.venvs/rejax`` (rejax 0.1.3, gymnax 0.0.9). ``--env`` picks the
environment and with it rejax's own PPO config for it (default CartPole-v1). Modes:

* ``whole``: build the agent, compile and run ``train`` once for ``--steps``
  env steps with evaluation switched off, then exit. The orchestrator times
  the whole process; the JSON reports the in-process breakdown.
* ``throughput``: compile and run ``train`` once, then time a second call of
  the already compiled function: env steps/s after compilation.
* ``eval``: train with a greedy (argmax) evaluation every ``--eval-every``
  env steps over ``--eval-episodes`` episodes, using rejax's own
  ``evaluate`` rollout; reports the first step whose mean return reaches
  ``--solved-return``, the last evaluation's and the best evaluation's return.

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import rejax  # noqa: E402
from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402
from rejax.evaluate import evaluate  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0

# rejax's PPO hyperparameters for CartPole-v1. rejax 0.1.3 does not ship its
# configs in the wheel; these are the ``ppo`` values of ``configs/cartpole.yaml``
# (identical in ``configs/gymnax/cartpole.yaml``) in the rejax GitHub
# repository (keraJLi/rejax). ``total_timesteps`` (100_000 there) and
# ``eval_freq`` (1_000 there) are set per run below.
REJAX_CARTPOLE_PPO = {
    "env": "CartPole-v1",
    "agent_kwargs": {"activation": "tanh"},
    "num_envs": 5,
    "num_steps": 100,
    "num_epochs": 5,
    "num_minibatches": 5,
    "learning_rate": 0.00075,
    "max_grad_norm": 0.5,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_eps": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
}

# rejax's PPO hyperparameters for Breakout-MinAtar. rejax has no MinAtar entry under
# ``configs/``; these are the ``ppo`` values of ``benchmark/breakout_1m.yaml`` in the rejax
# GitHub repository (keraJLi/rejax, unchanged at tag v0.1.3: the config of its MinAtar
# speed comparison with cleanRL). Its ``normalize_observations: true`` line is commented
# out there, so rejax's default (off) applies; no ``hidden_layer_sizes``, so rejax's
# default actor and critic apply (two separate 64-64 MLPs on the flattened 10x10x4 grid).
# ``total_timesteps`` (1_000_000 there) and ``eval_freq`` (50_000 there) are set per run.
REJAX_BREAKOUT_PPO = {
    "env": "Breakout-MinAtar",
    "agent_kwargs": {"activation": "tanh"},
    "num_envs": 32,
    "num_steps": 32,
    "num_epochs": 4,
    "num_minibatches": 4,
    "learning_rate": 0.00025674088686342003,
    "max_grad_norm": 1,
    "gamma": 0.995,
    "gae_lambda": 0.95,
    "clip_eps": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
}

CONFIGS = {"CartPole-v1": REJAX_CARTPOLE_PPO, "Breakout-MinAtar": REJAX_BREAKOUT_PPO}


def update_work(cfg: dict) -> dict:
    """Gradient work per collected env step, for comparing throughputs fairly."""
    batch = cfg["num_envs"] * cfg["num_steps"]
    updates = cfg["num_epochs"] * cfg["num_minibatches"]
    return {"updates_per_1k_steps": 1000 * updates / batch, "epochs": cfg["num_epochs"]}


def no_eval(algo, ts, rng):
    """Evaluation callback that does nothing (used for timing runs)."""
    return jnp.zeros(())


def greedy_eval(episodes: int):
    """Evaluation callback: mean/std greedy return over ``episodes`` episodes."""

    def callback(algo, ts, rng):
        def act(obs, key):
            dist = algo.actor.apply(
                ts.actor_ts.params, jnp.expand_dims(obs, 0), method="_action_dist"
            )
            return jnp.squeeze(dist.mode())

        max_steps = algo.env_params.max_steps_in_episode
        _, returns = evaluate(act, rng, algo.env, algo.env_params, episodes, max_steps)
        return ts.global_step, returns.mean(), returns.std()

    return callback


def make_algo(args, eval_every: int, callback):
    """Create rejax PPO with ``args.env``'s config, ``args.steps`` and the given eval setup."""
    config = dict(CONFIGS[args.env], total_timesteps=args.steps, eval_freq=eval_every)
    algo = rejax.PPO.create(skip_initial_evaluation=True, **config)
    return algo.replace(eval_callback=callback)


def compile_train(algo, key):
    """Ahead-of-time compile ``algo.train``; returns (compiled, seconds)."""
    start = time.perf_counter()
    compiled = jax.jit(algo.train).lower(key).compile()
    return compiled, time.perf_counter() - start


def timed_call(fn, key):
    """Run ``fn(key)`` to completion; returns (outputs, seconds)."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(key))
    return out, time.perf_counter() - start


def run_whole(args) -> dict:
    """One training run without evaluation, with an in-process time breakdown."""
    start = time.perf_counter()
    algo = make_algo(args, args.steps, no_eval)
    key = jax.random.PRNGKey(args.seed)
    create_s = time.perf_counter() - start
    compiled, compile_s = compile_train(algo, key)
    (ts, _), run_s = timed_call(compiled, key)
    steps = int(ts.global_step)
    return {
        "steps": steps,
        "create_s": create_s,
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s_first_run": steps / run_s,
    }


def run_throughput(args) -> dict:
    """Time a second call of the compiled train function (no evaluation)."""
    algo = make_algo(args, args.steps, no_eval)
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
    """Train with periodic greedy evaluation; find the first solved step."""
    algo = make_algo(args, args.eval_every, greedy_eval(args.eval_episodes))
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
        "best_eval_return": max(e["return_mean"] for e in evals) if evals else None,
    }


MODES = {"whole": run_whole, "throughput": run_throughput, "eval": run_eval}


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], MODES)
    parser.add_argument(
        "--env", choices=list(CONFIGS), default="CartPole-v1", help="gymnax env and its config"
    )
    args = parser.parse_args()
    result = MODES[args.mode](args)
    emit(
        {
            "system": "rejax",
            "mode": args.mode,
            "env": args.env,
            "seed": args.seed,
            "import_s": _IMPORT_S,
            "process_s": time.perf_counter() - _T0,
            "config": CONFIGS[args.env],
            "versions": package_versions(
                "rejax", "gymnax", "jax", "jaxlib", "flax", "optax", "distrax"
            ),
            "jax_devices": [str(d) for d in jax.devices()],
            **update_work(CONFIGS[args.env]),
            **result,
        }
    )


if __name__ == "__main__":
    main()
