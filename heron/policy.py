"""A trained run's policy from Python, acting on raw observations:

policy = heron.load("runs/cartpole")           # the latest checkpoint (best=True: best)
action = policy(observation)
"""

from __future__ import annotations

from heron import video
from heron.acting import Policy
from heron.api import check_has_policy, load_run
from heron.configs import ConfigError


def load(run_dir: str, best: bool = False, temperature: float = 0.0) -> Policy:
    """The policy of ``run_dir``'s latest checkpoint (``best``: of its best greedy
    evaluation), acting at ``temperature`` (0: greedy)."""
    if not 0 <= temperature < float("inf"):
        raise ConfigError(f"temperature must be finite and >= 0, got {temperature}")
    check_has_policy(run_dir, "act with")
    setup, _, state, checkpoint = load_run(run_dir, best)
    return Policy(setup, state, checkpoint, temperature)


def record_video(
    run_dir: str,
    out: str,
    episodes: int = 1,
    temperature: float = 0.0,
    best: bool = False,
    seed: int = 0,
    fps: int = 30,
) -> dict:
    """Plays ``episodes`` episodes of ``run_dir``'s policy in its environment's Gymnasium
    twin and writes their frames to ``out`` (``heron eval --video``); returns {"video",
    "frames", "returns"}."""
    import gymnasium

    from heron.api import load_config

    video.check_format(out)
    name = video.render_id(load_config(run_dir)[2].env)
    policy = load(run_dir, best=best, temperature=temperature)
    env = gymnasium.make(name, render_mode="rgb_array")
    try:
        frames, returns = video.play(policy, env, episodes, seed)
    finally:
        env.close()
    video.write(out, frames, fps)
    return {"video": out, "frames": len(frames), "returns": returns}
