"""Watching a trained agent: episodes of a run's policy rendered to a GIF or MP4.

    heron eval RUN_DIR --video out.gif [--episodes 2] [--temperature 0] [--best]

Rendering uses the environment's Gymnasium twin (``render_mode="rgb_array"``): ``gym:<id>``
itself, or for ``gymnax:<id>`` the Gymnasium environment of the same id (classic control:
same observations and actions). The policy acts on the rendered environment's raw
observations (``heron.load``). GIFs are written with Pillow (``gif_bytes``), MP4s with
imageio's ffmpeg.
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
    try:
        frames, returns = play(policy, env, episodes, seed)
    finally:
        env.close()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if suffix == ".gif":
        with open(out, "wb") as f:
            f.write(gif_bytes(frames, fps))
    else:
        imageio.mimsave(out, frames, fps=fps, macro_block_size=1)
    return {"video": out, "frames": len(frames), "returns": returns}


def play(policy, env, episodes: int, seed: int) -> tuple[list[np.ndarray], list[float]]:
    """``episodes`` episodes of ``policy`` (a ``heron.load`` policy) in ``env`` (a Gymnasium
    environment rendering rgb_array frames), from ``reset(seed=seed + episode)``: every frame
    (the first observation's too) and each episode's return."""
    frames, returns = [], []
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
    return frames, returns


def gif_bytes(frames: list[np.ndarray], fps: int = 30) -> bytes:
    """Frames [H, W, 3] as an animated GIF, looping. Every frame is mapped, undithered, to
    one palette of 256 colours taken from up to 16 frames spread over the episode: 0.95 s for
    CartPole's 501 frames of 600x400 on this machine, where Pillow's own palette per frame
    took 6.7 s."""
    import io

    from PIL import Image

    frames = [np.asarray(frame, np.uint8) for frame in frames]
    samples = frames[:: max(1, len(frames) // 16)][:16]
    palette = Image.fromarray(np.concatenate(samples, axis=0)).quantize(
        256, method=Image.Quantize.FASTOCTREE
    )
    images = [
        Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE)
        for frame in frames
    ]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
    )
    return buffer.getvalue()


class EvaluationVideos:
    """A training run's evaluation videos: one greedy episode of the current policy in the
    environment's Gymnasium twin (``render_id``), played on the host with the run's
    observation pipeline (``heron.load``'s ``Policy``; the first seed's, with several)."""

    def __init__(self, setup):
        import gymnasium

        self._setup = setup
        self._env = gymnasium.make(render_id(setup.run.env), render_mode="rgb_array")
        self._policy = None

    def record(self, state, steps: int) -> tuple[list[np.ndarray], float]:
        """The frames of one greedy episode of ``state``'s policy (the episode seeded by
        ``steps``) and its return."""
        from heron.policy import Policy

        if self._policy is None:
            self._policy = Policy(self._setup, state, steps)
        else:
            self._policy.use(state, steps)
        frames, returns = play(self._policy, self._env, 1, steps)
        return frames, returns[0]

    def close(self) -> None:
        self._env.close()
