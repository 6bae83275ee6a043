"""Figures as PNG bytes: fast for a widget's redraws, small for pictures a notebook keeps.

Not in ``simlib.tutorial.plots``: the explorer and the headline encode figures they are
handed, and importing this module must not import matplotlib (numpy and PIL,
which come with it, are imported only when a small PNG is made).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def png(fig: "Figure", dpi: float = 80, *, fast: bool = True) -> bytes:
    """``fig`` as PNG bytes; ``fast`` compresses lightly (the explorer encodes one per redraw)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1 if fast else 6})
    return buf.getvalue()


def small_png(fig: "Figure", dpi: float = 100) -> bytes:
    """``fig`` as a palette PNG of its 256 most frequent colours, for pictures kept in a notebook.

    The pictures are flat fills with anti-aliased edges, so mapping every other colour to its
    nearest frequent one loses nothing visible: a quarter of the bytes, every fill colour exact
    (median-cut or octree quantisation would merge the pastel role colours or lose a rare
    vermillion).
    """
    import numpy as np
    from PIL import Image

    old = fig.dpi
    fig.set_dpi(dpi)
    try:
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
    finally:
        fig.set_dpi(old)
    image = Image.fromarray(rgba[..., :3].copy())
    found = sorted(image.getcolors(image.width * image.height), reverse=True)
    every = np.array([c for _, c in found], dtype=np.int32)
    palette = every[:256]
    nearest = ((every[:, None, :] - palette[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    lookup = np.zeros(1 << 24, dtype=np.uint8)
    lookup[(every[:, 0] << 16) | (every[:, 1] << 8) | every[:, 2]] = nearest
    rgb = rgba[..., :3].astype(np.int32)
    indices = lookup[(rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]]
    out = Image.fromarray(indices)          # mode "L"; putpalette makes it "P"
    out.putpalette(palette.astype(np.uint8).ravel().tolist())
    buf = io.BytesIO()
    out.save(buf, format="png", optimize=True)
    return buf.getvalue()
