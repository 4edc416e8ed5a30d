"""Watching a trained agent: episodes of a policy rendered to a GIF or MP4 (the policies
themselves are heron.policy's ``record_video`` for ``heron eval --video`` and
heron.acting's ``EvaluationVideos`` for ``--video-every-n``).

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


def check_format(out: str) -> str:
    """The suffix of the video file ``out`` (.gif or .mp4), or a VideoError."""
    suffix = os.path.splitext(out)[1].lower()
    if suffix not in FORMATS:
        raise VideoError(f"video {out!r}: unknown format {suffix or '(none)'}; use .gif or .mp4")
    return suffix


def write(out: str, frames: list[np.ndarray], fps: int = 30) -> None:
    """Writes ``frames`` [H, W, 3] to ``out``: a GIF (``gif_bytes``) or an MP4 (imageio's
    ffmpeg); a VideoError for another format."""
    suffix = check_format(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if suffix == ".gif":
        with open(out, "wb") as f:
            f.write(gif_bytes(frames, fps))
        return
    import imageio.v2 as imageio

    imageio.mimsave(out, frames, fps=fps, macro_block_size=1)


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
