"""Stable-Baselines3 or SBX DQN on gymnasium CartPole-v1, one measurement per process.

Runs inside ``benchmarks/.venvs/sb3`` (``--library sb3``, torch CPU) or
``benchmarks/.venvs/sbx`` (``--library sbx``: sbx-rl, SB3's API on JAX). Hyperparameters
are rl-baselines3-zoo's for CartPole-v1 (``hyperparams/dqn.yml``): one env, learning rate
2.3e-3, batch 64, buffer 100k, learning_starts 1000, gamma 0.99, target update every 10
env steps, 128 gradient steps every 256 env steps, epsilon from 1 to 0.04 over the first
16% of the zoo's 50k steps (8,000 steps, kept at 8,000 whatever ``--steps``), net
[256, 256]. Modes:

* ``whole``: train ``--steps`` env steps without evaluation and exit. The orchestrator
  times the whole process; steps/s = steps / ``learn()`` seconds.
* ``eval``: train with a deterministic (greedy) evaluation every ``--eval-every`` env
  steps over ``--eval-episodes`` episodes on a separate env; reports the first step whose
  mean return reaches ``--solved-return``.

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import argparse
import time

_T0 = time.perf_counter()

import sys  # noqa: E402

from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402

ENV_ID = "CartPole-v1"
ZOO_EXPLORATION_STEPS = 8_000  # 0.16 x the zoo's n_timesteps 5e4
# rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 entry.
ZOO_CARTPOLE_DQN = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_final_eps": 0.04,
    "net_arch": [256, 256],
}


def update_work() -> dict:
    """Gradient updates per 1,000 collected env steps."""
    return {
        "updates_per_1k_steps": 1000
        * ZOO_CARTPOLE_DQN["gradient_steps"]
        / ZOO_CARTPOLE_DQN["train_freq"]
    }


def library_parser() -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0], ("whole", "eval"))
    parser.add_argument("--library", choices=("sb3", "sbx"), default="sb3")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads (sb3; 0: default)"
    )
    return parser.parse_args()


ARGS = library_parser()
if ARGS.library == "sb3":
    import torch  # noqa: E402
    from stable_baselines3 import DQN  # noqa: E402

    if ARGS.torch_threads > 0:
        torch.set_num_threads(ARGS.torch_threads)
else:
    from sbx import DQN  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0


def make_model(seed: int, steps: int):
    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    hyper = {k: v for k, v in ZOO_CARTPOLE_DQN.items() if k != "net_arch"}
    return DQN(
        "MlpPolicy",
        env,
        seed=seed,
        verbose=0,
        exploration_fraction=min(1.0, ZOO_EXPLORATION_STEPS / steps),
        policy_kwargs={"net_arch": ZOO_CARTPOLE_DQN["net_arch"]},
        **({"device": "cpu"} if ARGS.library == "sb3" else {}),
        **hyper,
    )


class GreedyEvalCallback(BaseCallback):
    """Evaluate the deterministic policy every ``every`` env steps."""

    def __init__(self, eval_env, every: int, episodes: int):
        super().__init__()
        self.eval_env, self.every, self.episodes = eval_env, every, episodes
        self.next_eval = every
        self.evals: list[dict] = []
        self.eval_s = 0.0

    def _evaluate(self) -> None:
        start = time.perf_counter()
        mean, std = evaluate_policy(
            self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True
        )
        seconds = time.perf_counter() - start
        self.eval_s += seconds
        self.evals.append(
            {"step": int(self.num_timesteps), "return_mean": float(mean), "return_std": float(std)}
        )

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self._evaluate()
            while self.next_eval <= self.num_timesteps:
                self.next_eval += self.every
        return True


def timed_learn(model, steps: int, callback=None) -> float:
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    return time.perf_counter() - start


def run_whole(args) -> dict:
    start = time.perf_counter()
    model = make_model(args.seed, args.steps)
    create_s = time.perf_counter() - start
    learn_s = timed_learn(model, args.steps)
    steps = int(model.num_timesteps)
    return {
        "steps": steps,
        "create_s": create_s,
        "learn_s": learn_s,
        "steps_per_s": steps / learn_s,
    }


def run_eval(args) -> dict:
    model = make_model(args.seed, args.steps)
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=args.seed + 10_000)
    callback = GreedyEvalCallback(eval_env, args.eval_every, args.eval_episodes)
    learn_s = timed_learn(model, args.steps, callback)
    steps = int(model.num_timesteps)
    return {
        "steps": steps,
        "learn_s": learn_s,
        "eval_s": callback.eval_s,
        "steps_per_s_excluding_eval": steps / (learn_s - callback.eval_s),
        "eval_episodes": args.eval_episodes,
        "evals": callback.evals,
        "steps_to_solved": first_step_reaching(callback.evals, args.solved_return),
        "final_eval_return": callback.evals[-1]["return_mean"] if callback.evals else None,
    }


def main() -> None:
    result = {"whole": run_whole, "eval": run_eval}[ARGS.mode](ARGS)
    names = ("stable-baselines3", "torch") if ARGS.library == "sb3" else ("sbx-rl", "jax")
    emit(
        {
            "system": ARGS.library,
            "mode": ARGS.mode,
            "seed": ARGS.seed,
            "import_s": _IMPORT_S,
            "process_s": time.perf_counter() - _T0,
            "config": {"n_envs": 1, "exploration_steps": ZOO_EXPLORATION_STEPS, **ZOO_CARTPOLE_DQN},
            "versions": package_versions(*names, "gymnasium", "numpy"),
            "argv": sys.argv[1:],
            **update_work(),
            **result,
        }
    )


if __name__ == "__main__":
    main()
