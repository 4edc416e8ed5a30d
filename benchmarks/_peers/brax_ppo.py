"""Brax's own PPO trainer (``brax.training.agents.ppo``) on a Brax or MuJoCo Playground
environment, for benchmarks/jax_physics.py, in its own venv (brax-requirements.txt: Brax's
trainer needs an older JAX than heron's).

Prints one JSON object as its last line: wall time, steps/s after the first evaluation (the
compile and the initial evaluation come before it), and every evaluation's mean return.
"""

from __future__ import annotations

import functools
import time

from _common import emit, equal_work_ppo_parser, package_versions


def make_env(env_id: str):
    import jax

    source, _, name = env_id.partition(":")
    if source == "brax":
        from brax import envs

        return envs.get_environment(name), 1000, None
    if source == "playground":
        from mujoco_playground import registry, wrapper

        config = registry.get_default_config(name)
        overrides = {"impl": "jax"} if jax.default_backend() != "gpu" else {}
        env = registry.load(name, config=config, config_overrides=overrides)
        return env, int(config.episode_length), wrapper.wrap_for_brax_training
    raise SystemExit(f"brax_ppo.py: unknown env {env_id!r}: brax:<name> or playground:<name>")


def main() -> None:
    parser = equal_work_ppo_parser(__doc__)
    args = parser.parse_args()

    start = time.perf_counter()
    from brax.training.agents.ppo import networks
    from brax.training.agents.ppo import train as ppo
    from flax import linen

    env, episode_length, wrap_env_fn = make_env(args.env)
    evals: list[dict] = []

    def progress(step, metrics):
        evals.append(
            {
                "step": int(step),
                "wall_s": time.perf_counter() - start,
                "return_mean": float(metrics["eval/episode_reward"]),
            }
        )

    network_factory = functools.partial(
        networks.make_ppo_networks,
        policy_hidden_layer_sizes=tuple(args.hidden_sizes),
        value_hidden_layer_sizes=tuple(args.hidden_sizes),
        activation=getattr(linen, args.activation),
    )
    ppo.train(
        environment=env,
        wrap_env_fn=wrap_env_fn,  # Playground's own wrapper for Brax's trainer (None: Brax's)
        num_timesteps=args.steps,
        num_envs=args.num_envs,
        episode_length=episode_length,
        unroll_length=args.unroll_length,
        batch_size=args.batch_size,
        num_minibatches=args.num_minibatches,
        num_updates_per_batch=args.num_epochs,
        discounting=args.discount,
        gae_lambda=args.gae_lambda,
        learning_rate=args.learning_rate,
        entropy_cost=args.entropy_cost,
        clipping_epsilon=args.clip_range,
        reward_scaling=args.reward_scale,
        normalize_observations=True,
        network_factory=network_factory,
        num_evals=args.num_evals,
        num_eval_envs=args.eval_episodes,
        deterministic_eval=True,
        seed=args.seed,
        progress_fn=progress,
    )
    wall = time.perf_counter() - start
    first, last = evals[0], evals[-1]
    rate = (last["step"] - first["step"]) / max(last["wall_s"] - first["wall_s"], 1e-9)
    emit(
        {
            "system": "brax",
            "env": args.env,
            "steps": last["step"],
            "wall_s": wall,
            "steps_per_s_after_compile": rate if len(evals) > 1 else None,
            "final_eval_return": last["return_mean"],
            "best_eval_return": max(e["return_mean"] for e in evals),
            "evals": evals,
            "versions": package_versions("brax", "playground", "jax", "mujoco-mjx"),
        }
    )


if __name__ == "__main__":
    main()
