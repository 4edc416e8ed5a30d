"""rejax's PPO on a Brax environment (rejax's own ``brax/<name>`` adapter), for
benchmarks/jax_physics.py, in its own venv (rejax-brax-requirements.txt: rejax 0.1.3 needs
jax 0.4.x, so it gets brax 0.12.1, the Brax of that period; heron runs brax 0.14).

Takes the same settings as brax_ppo.py and maps them onto rejax's PPO: ``num_envs`` envs x
``unroll_length`` steps per update (rejax's ``num_steps``), split into ``num_minibatches``
mini-batches, ``num_epochs`` passes, and the rest by name. rejax's own choices stay: a
separate actor and critic (each ``hidden_sizes``, the given activation), each with its own
Adam; a Gaussian policy with a state-independent std, clipped to the action bounds;
clipped value loss; truncation bootstrapped as termination. Rewards are multiplied by
``reward_scale`` for learning (rejax has no such setting: a wrapper does it); evaluations
are greedy (the policy's mean, clipped) on the unscaled environment.

Prints one JSON object as its last line: wall time, steps/s between the first evaluation
(after the compile, at step 0) and the last, and every evaluation's mean return.
"""

from __future__ import annotations

import time

from _common import emit, equal_work_ppo_parser, package_versions


def scaled(env, scale: float):
    """``env`` (rejax's gymnax adapter of a Brax env) with rewards multiplied by ``scale``."""
    step_env = env.step_env

    def step_with_scaled_reward(key, state, action, params):
        obs, state, reward, done, info = step_env(key, state, action, params)
        return obs, state, reward * scale, done, info

    env.step_env = step_with_scaled_reward
    return env


def main() -> None:
    parser = equal_work_ppo_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    source, _, name = args.env.partition(":")
    if source != "brax":
        raise SystemExit(f"rejax_brax_ppo.py: {args.env!r}: rejax runs brax:<name> only")

    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import rejax
    from rejax.compat.brax2gymnax import create_brax
    from rejax.evaluate import evaluate

    train_env, train_params = create_brax(name)
    eval_env, eval_params = create_brax(name)
    steps_per_update = args.num_envs * args.unroll_length
    periods = max(1, args.num_evals - 1)  # brax_ppo.py's num_evals counts the one at step 0
    eval_every = steps_per_update * max(1, args.steps // (steps_per_update * periods))
    evals: list[dict] = []

    def record(step, returns):
        evals.append(
            {
                "step": int(step),
                "wall_s": time.perf_counter() - start,
                "return_mean": float(returns.mean()),
                "return_std": float(returns.std()),
            }
        )

    def greedy_eval(algo, ts, rng):
        def act(obs, key):
            mean = algo.actor.apply(
                ts.actor_ts.params, jnp.expand_dims(obs, 0), method="_action_dist"
            ).mode()
            return jnp.clip(jnp.squeeze(mean, 0), -1.0, 1.0)

        _, returns = evaluate(
            act, rng, eval_env, eval_params, args.eval_episodes, eval_params.max_steps_in_episode
        )
        jax.debug.callback(record, ts.global_step, returns, ordered=True)
        return returns.mean()

    algo = rejax.PPO.create(
        env=scaled(train_env, args.reward_scale),
        env_params=train_params,
        agent_kwargs={"activation": args.activation, "hidden_layer_sizes": args.hidden_sizes},
        num_envs=args.num_envs,
        num_steps=args.unroll_length,
        num_minibatches=args.num_minibatches,
        num_epochs=args.num_epochs,
        learning_rate=args.learning_rate,
        gamma=args.discount,
        gae_lambda=args.gae_lambda,
        clip_eps=args.clip_range,
        ent_coef=args.entropy_cost,
        vf_coef=0.5,
        normalize_observations=True,
        total_timesteps=eval_every * (args.steps // eval_every),  # at most the budget
        eval_freq=eval_every,
    ).replace(eval_callback=greedy_eval)
    ts, _ = jax.block_until_ready(jax.jit(algo.train)(jax.random.PRNGKey(args.seed)))
    wall = time.perf_counter() - start
    first, last = evals[0], evals[-1]
    rate = (last["step"] - first["step"]) / max(last["wall_s"] - first["wall_s"], 1e-9)
    emit(
        {
            "system": "rejax",
            "env": args.env,
            "steps": int(ts.global_step),
            "wall_s": wall,
            "steps_per_s_after_compile": rate if len(evals) > 1 else None,
            "final_eval_return": last["return_mean"],
            "best_eval_return": max(e["return_mean"] for e in evals),
            "evals": evals,
            "versions": package_versions("rejax", "brax", "jax"),
        }
    )


if __name__ == "__main__":
    main()
