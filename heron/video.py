"""Watching a trained agent: episodes of a run's policy rendered to a GIF or MP4.

    heron eval RUN_DIR --video out.gif [--episodes 2] [--temperature 0] [--best]

Rendering uses the environment's Gymnasium twin (``render_mode="rgb_array"``): ``gym:<id>``
itself, or for ``gymnax:<id>`` the Gymnasium environment of the same id (classic control:
same observations and actions). The policy acts on the rendered environment's raw
observations (``heron.load``). GIFs are written with Pillow, MP4s with imageio's ffmpeg.
"""

from __future__ import annotations

import os

import numpy as np

from heron.configs import ConfigError

FORMATS = (".gif", ".mp4")


class VideoError(ConfigError):
    """A video heron cannot make: an unknown format or an environment that cannot render."""


def render_id(env_id: str) -> str:
    """The Gymnasium id that renders ``env_id``, or a VideoError saying why there is none."""
    import gymnasium

    source, _, name = env_id.partition(":")
    if source in ("gym", "gymnax") and name in gymnasium.registry:
        return name
    raise VideoError(
        f"{env_id!r} cannot be rendered: videos need a Gymnasium environment with an "
        "rgb_array renderer (gym:<id>, or gymnax:<id> with a Gymnasium twin such as "
        "gymnax:CartPole-v1)"
    )


def record(
    run_dir: str,
    out: str,
    episodes: int = 1,
    temperature: float = 0.0,
    best: bool = False,
    seed: int = 0,
    fps: int = 30,
) -> dict:
    """Plays ``episodes`` episodes of ``run_dir``'s policy and writes their frames to
    ``out``; returns {"video", "frames", "returns"}."""
    import gymnasium
    import imageio.v2 as imageio

    from heron import api
    from heron import policy as policies

    suffix = os.path.splitext(out)[1].lower()
    if suffix not in FORMATS:
        raise VideoError(f"video {out!r}: unknown format {suffix or '(none)'}; use .gif or .mp4")
    env_id = api.load_config(run_dir)[2].env
    name = render_id(env_id)
    policy = policies.load(run_dir, best=best, temperature=temperature)
    env = gymnasium.make(name, render_mode="rgb_array")
    frames, returns = [], []
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            policy.reset()
            frames.append(env.render())
            total, done = 0.0, False
            while not done:
                action = np.asarray(policy(observation))
                observation, reward, terminated, truncated, _ = env.step(
                    action.item() if action.ndim == 0 else action
                )
                frames.append(env.render())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if suffix == ".gif":
        imageio.mimsave(out, frames, duration=1000 / fps, loop=0)
    else:
        imageio.mimsave(out, frames, fps=fps, macro_block_size=1)
    return {"video": out, "frames": len(frames), "returns": returns}
