"""Stable-Baselines3 PPO with rl-baselines3-zoo's MuJoCo settings, as the zoo runs it: the
control for heron's PPO MuJoCo presets (``heron/presets/ppo.toml``; its Hopper preset is
SB3's defaults, ``--sb3-defaults``).

Runs inside ``benchmarks/.venvs/sb3`` (``mujoco.py`` makes it)::

    benchmarks/.venvs/sb3/bin/python benchmarks/_peers/sb3_ppo_mujoco.py \\
        --env Hopper-v5 --seed 0 --steps 300000

One env under ``VecNormalize`` (observations and rewards, the reward's return discounted by
the agent's gamma, as the zoo passes it); a greedy evaluation of ``--eval-episodes``
episodes every ``--eval-every`` steps on a separate env with the training statistics and
raw rewards. Prints one JSON line per evaluation.
"""

from __future__ import annotations

import argparse
import json

import torch
from sb3_ppo import GreedyEvalCallback
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

# rl-baselines3-zoo hyperparams/ppo.yml: the Hopper-v3 and HalfCheetah-v3 entries (tuned,
# with log_std_init=-2, ortho_init=False, ReLU, pi and vf 256x256) and the Ant-v3 entry
# (SB3's defaults: 2048 steps, 10 epochs of batches of 64, lr 3e-4, 64x64 tanh, log-std 0,
# orthogonal init). --sb3-defaults runs SB3's defaults on any of them (heron's Hopper preset).
TUNED_POLICY = dict(
    log_std_init=-2,
    ortho_init=False,
    activation_fn=torch.nn.ReLU,
    net_arch=dict(pi=[256, 256], vf=[256, 256]),
)
SB3_DEFAULTS = dict(gamma=0.99)
ZOO = {
    "Hopper-v5": dict(
        batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
        ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
        max_grad_norm=0.7, vf_coef=0.835671, policy_kwargs=TUNED_POLICY,
    ),
    "HalfCheetah-v5": dict(
        batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
        ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
        max_grad_norm=0.8, vf_coef=0.58096, policy_kwargs=TUNED_POLICY,
    ),
    "Ant-v5": SB3_DEFAULTS,
}  # fmt: skip


class NormalizedGreedyEvaluation(GreedyEvalCallback):
    """``sb3_ppo``'s greedy evaluation on an env that normalises observations with the
    training env's latest statistics; prints each evaluation as a JSON line."""

    def __init__(self, train_env, eval_env, every: int, episodes: int):
        super().__init__(eval_env, every, episodes)
        self.train_env = train_env

    def _evaluate(self) -> None:
        self.eval_env.obs_rms = self.train_env.obs_rms
        super()._evaluate()
        print(json.dumps(self.evals[-1]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ZOO), default="Hopper-v5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=10_240)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument(
        "--sb3-defaults", action="store_true", help="SB3's PPO defaults instead of the zoo's entry"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    hyper = SB3_DEFAULTS if args.sb3_defaults else ZOO[args.env]
    gamma = hyper["gamma"]
    train_env = VecNormalize(make_vec_env(args.env, n_envs=1, seed=args.seed), gamma=gamma)
    eval_env = VecNormalize(
        make_vec_env(args.env, n_envs=1, seed=args.seed + 1000),
        training=False,
        norm_reward=False,
        gamma=gamma,
    )
    model = PPO("MlpPolicy", train_env, seed=args.seed, device="cpu", **hyper)
    evaluation = NormalizedGreedyEvaluation(
        train_env, eval_env, args.eval_every, args.eval_episodes
    )
    model.learn(args.steps, callback=evaluation)


if __name__ == "__main__":
    main()
