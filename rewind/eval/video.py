"""Episode videos: frames with the task stage written on them, encoded to MP4 with imageio-ffmpeg.

Text is rasterised once per distinct label with matplotlib's Agg canvas (no OpenCV) and alpha-blended
into the top-left corner of each frame.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rewind.utils.render import RenderBackendError, ensure_headless_gl


def require_rendering() -> str:
    """The OpenGL backend videos are rendered with (call before the first frame).

    Raises:
        RenderBackendError: none works; the message names ``video.episodes`` and the fix.
    """
    try:
        return ensure_headless_gl()
    except RenderBackendError as exc:
        message = f"video.episodes needs OpenGL rendering: {exc} (or video.episodes=0)"
        raise RenderBackendError(message) from None


@functools.lru_cache(maxsize=64)
def text_bitmap(text: str, height: int = 18) -> np.ndarray:
    """Alpha mask ``[h, w]`` float32 in ``[0, 1]`` of ``text`` in a sans-serif font ``height`` px tall."""
    dpi = 100
    width = max(8, int(0.62 * height * len(text)) + 8)
    fig = Figure(figsize=(width / dpi, (height + 6) / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    fig.text(0.02, 0.5, text, fontsize=height * 0.72 * 72 / dpi, va="center", ha="left", color="black")
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())
    return (1.0 - rgba[..., 0].astype(np.float32) / 255.0) * (rgba[..., 3] / 255.0)


def annotate(frame: np.ndarray, text: str, color: tuple[int, int, int] = (255, 255, 255)) -> np.ndarray:
    """A copy of ``frame`` (uint8 ``[H, W, 3]``) with ``text`` on a dark band at the top-left."""
    height = max(10, frame.shape[0] // 16)
    mask = text_bitmap(text, height)
    h, w = min(mask.shape[0], frame.shape[0]), min(mask.shape[1], frame.shape[1])
    out = frame.copy()
    region = out[:h, :w].astype(np.float32) * 0.45  # darken the band so the text reads on any scene
    alpha = mask[:h, :w, None]
    out[:h, :w] = (region * (1 - alpha) + np.asarray(color, np.float32) * alpha).astype(np.uint8)
    return out


def write_video(path: str | os.PathLike[str], frames: list[np.ndarray], fps: int = 20) -> Path:
    """Encode ``frames`` (uint8 ``[H, W, 3]``, even sides) as an H.264 MP4 at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1, quality=7) as writer:
        for frame in frames:
            writer.append_data(frame)
    return path
