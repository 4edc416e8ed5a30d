"""Stable-Baselines3 or SBX (``--library``) SAC or TD3 (``--algo``) on a Gymnasium MuJoCo
env, one measurement per process.

``--mode eval`` trains and evaluates (below); ``--mode update`` times the updates alone:
``--steps`` random env steps fill the replay (no update yet), then ``--rounds`` calls of
``model.train(gradient_steps=--updates)`` (the library's own replay sampling and updates,
what ``learn()`` runs after each env step), after one untimed call (SBX compiles in it).

Runs inside ``benchmarks/.venvs/sb3`` (SB3 on torch, one torch thread unless
``--torch-threads``) or ``benchmarks/.venvs/sbx`` (SBX, the JAX port; its venv also holds
SB3, whose env utilities it uses). Hyperparameters are rl-baselines3-zoo's MuJoCo ones:

* SAC (``hyperparams/sac.yml``, ``HalfCheetah-v3: &mujoco-defaults``, shared by Hopper,
  Walker2d and Ant): ``learning_starts: 10000``; the rest SAC's defaults (lr 3e-4, batch
  256, 256x256 ReLU networks, tau 0.005, gamma 0.99, automatic entropy, one gradient
  step per env step).
* TD3 (``hyperparams/td3.yml``, MuJoCo entries): ``learning_starts: 10000``,
  ``noise_type: normal``, ``noise_std: 0.1``, ``train_freq: 1``, ``gradient_steps: 1``,
  ``learning_rate: 1e-3``, ``batch_size: 256``, ``net_arch: [400, 300]``; TD3's defaults
  otherwise (tau 0.005, gamma 0.99, policy delay 2, target noise 0.2 clipped to 0.5).

One env (a 1-env DummyVecEnv). Trains ``--steps`` env steps with a deterministic
evaluation every ``--eval-every`` env steps over ``--eval-episodes`` episodes on a separate
env, and at the end. Reports env steps/s of ``learn()`` less the evaluation time, the
gradient updates, and the eval curve (``wall_s`` from the start of this script).

Prints one JSON object as the last stdout line.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402
from _common import base_parser, emit, package_versions  # noqa: E402
from sb3_ppo import timed_learn  # noqa: E402
from sb3_sac import SAC_DEFAULTS, TimedGreedyEvalCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

ZOO = {
    "sac": {"learning_starts": 10_000},
    "td3": {
        "learning_starts": 10_000,
        "noise_type": "normal",
        "noise_std": 0.1,
        "train_freq": 1,
        "gradient_steps": 1,
        "learning_rate": 1e-3,
        "batch_size": 256,
        "policy_kwargs": {"net_arch": [400, 300]},
    },
}
# SB3 2.9.2's defaults that the zoo keeps, written out so the run is reproducible.
DEFAULTS = {
    # sb3_sac's written-out SAC defaults (its learning_starts is the zoo's here), SB3's lr;
    # target_update_interval 1 is SB3's default, which SBX's SAC does not take
    "sac": {
        **{
            k: v
            for k, v in SAC_DEFAULTS.items()
            if k not in ("learning_starts", "target_update_interval")
        },
        "learning_rate": 3e-4,
    },
    "td3": {
        "buffer_size": 1_000_000,
        "tau": 0.005,
        "gamma": 0.99,
        "policy_delay": 2,
        "target_policy_noise": 0.2,
        "target_noise_clip": 0.5,
    },
}


def config(algo: str, learning_starts: int) -> dict:
    """The constructor's keyword arguments (the zoo's values over SB3's defaults)."""
    values = {**DEFAULTS[algo], **ZOO[algo], "learning_starts": learning_starts}
    values.pop("noise_type", None)
    values.pop("noise_std", None)
    return values


def make_model(args):
    if args.library == "sb3":
        import torch
        from stable_baselines3 import SAC, TD3

        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        extra = {"device": "cpu"}
    else:
        from sbx import SAC, TD3

        extra = {}
    env = make_vec_env(args.env, n_envs=1, seed=args.seed, vec_env_cls=DummyVecEnv)
    kwargs = config(args.algo, args.learning_starts)
    if args.library == "sbx" and args.algo == "sac":
        kwargs.pop("target_entropy")  # SBX's SAC sets it as SB3's "auto" does
    if args.algo == "td3":
        size = env.action_space.shape[-1]
        noise = ZOO["td3"]["noise_std"]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(size), noise * np.ones(size))
    cls = SAC if args.algo == "sac" else TD3
    return cls("MlpPolicy", env, seed=args.seed, verbose=0, **kwargs, **extra)


def run(args) -> dict:
    model = make_model(args)
    eval_env = make_vec_env(args.env, n_envs=1, seed=args.seed + 10_000)
    callback = TimedGreedyEvalCallback(eval_env, args.eval_every, args.eval_episodes)
    learn_s = timed_learn(model, args.steps, callback)
    steps = int(model.num_timesteps)
    train_s = learn_s - callback.eval_s
    updates = int(getattr(model, "_n_updates", 0))
    returns = [e["return_mean"] for e in callback.evals]
    return {
        "steps": steps,
        "updates": updates,
        "learn_s": learn_s,
        "eval_s": callback.eval_s,
        "steps_per_s_excluding_eval": steps / train_s,
        "updates_per_s_excluding_eval": updates / train_s,
        "evals": callback.evals,
        "final_eval_return": returns[-1],
        "best_eval_return": max(returns),
    }


def time_updates(args) -> dict:
    if args.steps > args.learning_starts:
        raise SystemExit(
            f"--mode update fills the replay with random steps only: --steps {args.steps} "
            f"must not pass --learning-starts {args.learning_starts}"
        )
    model = make_model(args)
    model.learn(total_timesteps=args.steps)
    times = []
    for round_ in range(args.rounds + 1):  # the first call compiles SBX's updates
        start = time.perf_counter()
        model.train(gradient_steps=args.updates, batch_size=model.batch_size)
        if round_:
            times.append((time.perf_counter() - start) * 1e3 / args.updates)
    return {"min_ms": min(times), "median_ms": statistics.median(times), "ms": times}


def parse_args() -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0], ("eval", "update"))
    parser.add_argument("--library", choices=("sb3", "sbx"), required=True)
    parser.add_argument("--algo", choices=("sac", "td3"), required=True)
    parser.add_argument("--env", required=True, help="a Gymnasium id, e.g. HalfCheetah-v5")
    parser.add_argument("--learning-starts", type=int, default=10_000)
    parser.add_argument("--torch-threads", type=int, default=1, help="SB3 only; 0: torch's")
    parser.add_argument("--rounds", type=int, help="update mode: timed calls (default 8)")
    parser.add_argument("--updates", type=int, help="update mode: per call (default 100)")
    args = parser.parse_args()
    if args.mode == "eval" and (args.rounds, args.updates) != (None, None):
        parser.error("--rounds and --updates time --mode update; --mode eval takes neither")
    evaluation = ("eval_every", "eval_episodes", "solved_return")
    if args.mode == "update" and any(
        getattr(args, name) != parser.get_default(name) for name in evaluation
    ):
        parser.error("--mode update evaluates nothing: --eval-every, --eval-episodes and "
                     "--solved-return are --mode eval's")  # fmt: skip
    args.rounds = 8 if args.rounds is None else args.rounds
    args.updates = 100 if args.updates is None else args.updates
    return args


def main() -> None:
    args = parse_args()
    result = run(args) if args.mode == "eval" else time_updates(args)
    names = ("stable-baselines3", "torch") if args.library == "sb3" else ("sbx-rl", "jax")
    emit(
        {
            "system": args.library,
            "algo": args.algo,
            "seed": args.seed,
            "process_s": time.perf_counter() - _T0,
            "config": {"env": args.env, "n_envs": 1, **config(args.algo, args.learning_starts)},
            "versions": package_versions(*names, "gymnasium", "mujoco"),
            **result,
        }
    )


if __name__ == "__main__":
    main()
