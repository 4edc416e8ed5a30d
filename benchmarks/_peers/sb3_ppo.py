"""Stable-Baselines3 PPO on gymnasium CartPole-v1, one measurement per process.

Runs inside ``benchmarks/.venvs/sb3``. Hyperparameters are rl-baselines3-zoo's
for CartPole-v1 (8 DummyVecEnv envs, n_steps 32, batch 256, gae_lambda 0.8,
gamma 0.98, 20 epochs, ent_coef 0, learning rate and clip range linearly
annealed from 1e-3 and 0.2 to 0 over training). Modes:

* ``whole``: train ``--steps`` env steps without evaluation and exit. The
  orchestrator times the whole process; steps/s = steps / ``learn()`` seconds.
* ``eval``: train with a deterministic (greedy) evaluation every
  ``--eval-every`` env steps over ``--eval-episodes`` episodes on a separate
  env; reports the first step whose mean return reaches ``--solved-return``
  and learn() time with the evaluation time subtracted.

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import math
import time

_T0 = time.perf_counter()

import torch  # noqa: E402
from _common import base_parser, emit, first_step_reaching, package_versions  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0

ENV_ID = "CartPole-v1"
N_ENVS = 8
# rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1 entry ("lin_" = linear schedule).
ZOO_CARTPOLE_PPO = {
    "n_steps": 32,
    "batch_size": 256,
    "gae_lambda": 0.8,
    "gamma": 0.98,
    "n_epochs": 20,
    "ent_coef": 0.0,
    "learning_rate": "lin_1e-3",
    "clip_range": "lin_0.2",
}


# Why one torch thread by default: with this small MLP (64x64, batches of 256),
# one thread is as fast as two on an idle 2-core machine (~4,300 steps/s either
# way), while two threads collapse to a few hundred steps/s as soon as another
# process takes a core. One thread is SB3's best and most stable setting here.
# (rl-zoo leaves torch's default unless given --num-threads.)
TORCH_THREADS_NOTE = "1 thread: as fast as 2 when idle, far faster under load"


def update_work() -> dict:
    """Gradient work per collected env step, for comparing throughputs fairly."""
    rollout = ZOO_CARTPOLE_PPO["n_steps"] * N_ENVS
    minibatches = math.ceil(rollout / ZOO_CARTPOLE_PPO["batch_size"])
    updates = ZOO_CARTPOLE_PPO["n_epochs"] * minibatches
    return {
        "updates_per_1k_steps": 1000 * updates / rollout,
        "epochs": ZOO_CARTPOLE_PPO["n_epochs"],
    }


def linear_schedule(initial: float):
    """SB3 schedule going linearly from ``initial`` to 0 as training progresses."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def make_model(seed: int) -> PPO:
    """PPO with the zoo CartPole hyperparameters on 8 DummyVecEnv envs (CPU)."""
    env = make_vec_env(ENV_ID, n_envs=N_ENVS, seed=seed, vec_env_cls=DummyVecEnv)
    hyper = dict(ZOO_CARTPOLE_PPO)
    hyper["learning_rate"] = linear_schedule(1e-3)
    hyper["clip_range"] = linear_schedule(0.2)
    return PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **hyper)


class GreedyEvalCallback(BaseCallback):
    """Evaluate the deterministic policy every ``every`` env steps.

    Records ``{"step", "return_mean", "return_std", "eval_s"}`` per evaluation
    and accumulates the time spent evaluating in ``eval_s``.
    """

    def __init__(self, eval_env, every: int, episodes: int):
        super().__init__()
        self.eval_env = eval_env
        self.every = every
        self.episodes = episodes
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
            {
                "step": int(self.num_timesteps),
                "return_mean": float(mean),
                "return_std": float(std),
                "eval_s": seconds,
            }
        )

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self._evaluate()
            while self.next_eval <= self.num_timesteps:
                self.next_eval += self.every
        return True

    def _on_training_end(self) -> None:
        if not self.evals or self.evals[-1]["step"] < self.num_timesteps:
            self._evaluate()


def timed_learn(model: PPO, steps: int, callback=None) -> float:
    """Run ``model.learn`` and return its wall-clock seconds."""
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    return time.perf_counter() - start


def run_whole(args) -> dict:
    """One training run without evaluation."""
    start = time.perf_counter()
    model = make_model(args.seed)
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
    """Train with periodic greedy evaluation; find the first solved step."""
    model = make_model(args.seed)
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
        "final_eval_return": callback.evals[-1]["return_mean"],
    }


MODES = {"whole": run_whole, "eval": run_eval}


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], MODES)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (0: torch's default, one per core); see TORCH_THREADS_NOTE",
    )
    args = parser.parse_args()
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    result = MODES[args.mode](args)
    emit(
        {
            "system": "sb3",
            "mode": args.mode,
            "seed": args.seed,
            "import_s": _IMPORT_S,
            "process_s": time.perf_counter() - _T0,
            "config": {"n_envs": N_ENVS, "vec_env": "DummyVecEnv", **ZOO_CARTPOLE_PPO},
            "versions": package_versions("stable-baselines3", "torch", "gymnasium", "numpy"),
            "torch_threads": torch.get_num_threads(),
            **update_work(),
            **result,
        }
    )


if __name__ == "__main__":
    main()
