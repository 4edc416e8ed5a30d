"""Stable-Baselines3 SAC on gymnasium Pendulum-v1, one measurement per process.

Runs inside ``benchmarks/.venvs/sb3`` (the same venv as ``sb3_ppo.py``).
Hyperparameters are rl-baselines3-zoo's for Pendulum-v1 (``hyperparams/sac.yml``:
``n_timesteps: 20000``, ``policy: 'MlpPolicy'``, ``learning_rate: !!float 1e-3``;
every other value is SB3's SAC default, written out in ``SAC_CONFIG`` below).
One env (a 1-env DummyVecEnv), one gradient update per env step.

Trains ``--steps`` env steps with a deterministic (greedy) evaluation every
``--eval-every`` env steps over ``--eval-episodes`` episodes on a separate env,
and once more at the end. Reports env steps/s of ``learn()`` with the
evaluation time subtracted, the number of gradient updates, and the eval
curve: ``{"step", "wall_s", "return_mean", "return_std", "eval_s"}`` per
evaluation, ``wall_s`` counted from the start of this script (as heron's
``metrics.jsonl`` counts from the start of its process).

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import torch  # noqa: E402
from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402
from sb3_ppo import GreedyEvalCallback, timed_learn  # noqa: E402
from stable_baselines3 import SAC  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0

ENV_ID = "Pendulum-v1"
N_ENVS = 1
# rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1 entry: n_timesteps 20000,
# policy MlpPolicy, learning_rate 1e-3. The rest are SAC's defaults in
# stable-baselines3 2.9.2 (what the zoo gets by not setting them), listed so the
# run is reproducible without either source at hand.
ZOO_PENDULUM_SAC = {"n_timesteps": 20_000, "policy": "MlpPolicy", "learning_rate": 1e-3}
SAC_DEFAULTS = {
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "ent_coef": "auto",
    "target_update_interval": 1,
    "target_entropy": "auto",
    "policy_kwargs": {"net_arch": [256, 256]},
}
SAC_CONFIG = {"learning_rate": ZOO_PENDULUM_SAC["learning_rate"], **SAC_DEFAULTS}


class TimedGreedyEvalCallback(GreedyEvalCallback):
    """``sb3_ppo``'s greedy evaluation, also stamping each point with ``wall_s``.

    ``wall_s`` is seconds since this script started, taken after the evaluation.
    """

    def _evaluate(self) -> None:
        super()._evaluate()
        self.evals[-1]["wall_s"] = time.perf_counter() - _T0


def make_model(seed: int) -> SAC:
    """SAC with the zoo Pendulum-v1 hyperparameters on one DummyVecEnv env (CPU)."""
    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed, vec_env_cls=DummyVecEnv)
    policy = ZOO_PENDULUM_SAC["policy"]
    return SAC(policy, env, seed=seed, device="cpu", verbose=0, **SAC_CONFIG)


def run(args) -> dict:
    """Train with periodic greedy evaluation; throughput excludes evaluation time."""
    model = make_model(args.seed)
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=args.seed + 10_000)
    callback = TimedGreedyEvalCallback(eval_env, args.eval_every, args.eval_episodes)
    learn_s = timed_learn(model, args.steps, callback)
    steps = int(model.num_timesteps)
    train_s = learn_s - callback.eval_s
    returns = [e["return_mean"] for e in callback.evals]
    return {
        "steps": steps,
        "updates": int(model._n_updates),
        "learn_s": learn_s,
        "eval_s": callback.eval_s,
        "steps_per_s_excluding_eval": steps / train_s,
        "updates_per_s_excluding_eval": model._n_updates / train_s,
        "eval_episodes": args.eval_episodes,
        "evals": callback.evals,
        "steps_to_threshold": first_step_reaching(callback.evals, args.solved_return),
        "final_eval_return": returns[-1],
        "best_eval_return": max(returns),
    }


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], ("eval",))
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (0: torch's default, one per core)",
    )
    args = parser.parse_args()
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    result = run(args)
    emit(
        {
            "system": "sb3",
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
                **SAC_CONFIG,
            },
            "threshold_return": args.solved_return,
            "versions": package_versions("stable-baselines3", "torch", "gymnasium", "numpy"),
            "torch_threads": torch.get_num_threads(),
            **result,
        }
    )


if __name__ == "__main__":
    main()
