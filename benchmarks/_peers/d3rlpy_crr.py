"""d3rlpy CRR or BC (its default hyperparameters) trained from a Minari dataset on local disk.

Runs inside ``benchmarks/.venvs/d3rlpy`` (see ``d3rlpy-requirements.txt``). Reads the
dataset with minari (no hub), trains ``--algo`` (``crr``: ``CRRConfig()``, ``bc``:
``BCConfig()``) for ``--updates`` gradient steps, evaluates greedily on Gymnasium's
Pendulum-v1 and prints one JSON line: fit time, updates per second and the final
evaluation return.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, package_versions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algo", choices=("crr", "bc"), default="crr")
    parser.add_argument("--dataset", required=True, help="Minari dataset directory")
    parser.add_argument("--env", default="Pendulum-v1", help="Gymnasium id for evaluation")
    parser.add_argument("--updates", type=int, required=True, help="gradient steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--torch-threads", type=int, default=0, help="0: torch's default")
    args = parser.parse_args()

    start = time.perf_counter()
    import d3rlpy
    import gymnasium
    import numpy as np
    import torch
    from minari import MinariDataset

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    d3rlpy.seed(args.seed)
    data = MinariDataset(args.dataset)
    episodes = list(data.iterate_episodes())
    dataset = d3rlpy.dataset.MDPDataset(
        observations=np.concatenate([e.observations[:-1] for e in episodes]),
        actions=np.concatenate([e.actions for e in episodes]),
        rewards=np.concatenate([e.rewards for e in episodes]),
        terminals=np.concatenate([e.terminations for e in episodes]).astype(np.float32),
        timeouts=np.concatenate([e.truncations for e in episodes]).astype(np.float32),
    )
    returns = np.array([e.rewards.sum() for e in episodes])
    config = d3rlpy.algos.CRRConfig() if args.algo == "crr" else d3rlpy.algos.BCConfig()
    crr = config.create(device="cpu:0")
    fit_start = time.perf_counter()
    crr.fit(
        dataset,
        n_steps=args.updates,
        n_steps_per_epoch=args.updates,
        show_progress=False,
        save_interval=10**9,
        logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
    )
    fit_s = time.perf_counter() - fit_start
    env = gymnasium.make(args.env)
    eval_returns = []
    for episode in range(args.eval_episodes):
        observation, _ = env.reset(seed=args.seed * 1000 + episode)
        total, done = 0.0, False
        while not done:
            action = crr.predict(observation[None].astype(np.float32))[0]
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        eval_returns.append(total)
    emit(
        {
            "system": f"d3rlpy {args.algo.upper()}",
            "updates": args.updates,
            "dataset_episodes": len(episodes),
            "dataset_return_mean": float(returns.mean()),
            "fit_s": fit_s,
            "updates_per_s": args.updates / fit_s,
            "final_eval_return": float(np.mean(eval_returns)),
            "final_eval_std": float(np.std(eval_returns)),
            "eval_episodes": args.eval_episodes,
            "process_s_before_exit": time.perf_counter() - start,
            "torch_threads": torch.get_num_threads(),
            "versions": package_versions("d3rlpy", "torch", "minari", "gymnasium"),
        }
    )


if __name__ == "__main__":
    main()
