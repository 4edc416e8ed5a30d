"""SBX SAC (``sbx-rl``, the JAX port of Stable-Baselines3) on gymnasium Pendulum-v1, one
measurement per process.

Runs inside ``benchmarks/.venvs/sbx`` (``sbx-requirements.txt``; SBX installs SB3 and
torch beside its JAX, so it has a venv of its own). Hyperparameters are rl-baselines3-zoo's
for Pendulum-v1 (``hyperparams/sac.yml``: ``learning_rate 1e-3``, the rest SAC's defaults),
the same as ``sb3_sac.py``'s but for SB3's ``target_update_interval``, which SBX's SAC does
not have (it updates its targets every gradient step, as SB3 does with interval 1). One
env, one gradient update per env step. Measures and prints as ``sb3_sac.py`` does; SBX's
JAX compilation happens inside ``learn()``, so its steps/s include it.

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402
from sb3_ppo import timed_learn  # noqa: E402
from sb3_sac import SAC_DEFAULTS, ZOO_PENDULUM_SAC, TimedGreedyEvalCallback  # noqa: E402
from sbx import SAC  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0

ENV_ID = "Pendulum-v1"
N_ENVS = 1
SBX_CONFIG = {
    "learning_rate": ZOO_PENDULUM_SAC["learning_rate"],
    **{k: v for k, v in SAC_DEFAULTS.items() if k != "target_update_interval"},
}


def make_model(seed: int) -> SAC:
    """SBX SAC with the zoo Pendulum-v1 hyperparameters on one DummyVecEnv env."""
    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed, vec_env_cls=DummyVecEnv)
    return SAC(ZOO_PENDULUM_SAC["policy"], env, seed=seed, verbose=0, **SBX_CONFIG)


def run(args) -> dict:
    """Train with periodic greedy evaluation; throughput excludes evaluation time."""
    model = make_model(args.seed)
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=args.seed + 10_000)
    callback = TimedGreedyEvalCallback(eval_env, args.eval_every, args.eval_episodes)
    learn_s = timed_learn(model, args.steps, callback)
    steps = int(model.num_timesteps)
    train_s = learn_s - callback.eval_s
    returns = [e["return_mean"] for e in callback.evals]
    updates = int(getattr(model, "_n_updates", 0))
    return {
        "steps": steps,
        "updates": updates,
        "learn_s": learn_s,
        "eval_s": callback.eval_s,
        "steps_per_s_excluding_eval": steps / train_s,
        "updates_per_s_excluding_eval": updates / train_s,
        "eval_episodes": args.eval_episodes,
        "evals": callback.evals,
        "steps_to_threshold": first_step_reaching(callback.evals, args.solved_return),
        "final_eval_return": returns[-1],
        "best_eval_return": max(returns),
    }


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], ("eval",))
    args = parser.parse_args()
    result = run(args)
    emit(
        {
            "system": "sbx",
            "algo": "sac",
            "mode": args.mode,
            "seed": args.seed,
            "import_s": _IMPORT_S,
            "process_s": time.perf_counter() - _T0,
            "config": {
                "env": ENV_ID,
                "n_envs": N_ENVS,
                "vec_env": "DummyVecEnv",
                "zoo": ZOO_PENDULUM_SAC,
                **SBX_CONFIG,
            },
            "threshold_return": args.solved_return,
            "versions": package_versions("sbx-rl", "jax", "flax", "stable-baselines3", "gymnasium"),
            **result,
        }
    )


if __name__ == "__main__":
    main()
