"""Figures as a notebook and a widget show them: PNG bytes, and the wrapper a cell displays.

``show(fig)`` displays a ``simlib.tutorial.plots`` figure (IPython's inline backend skips
figures without Axes, which is what plots draws for speed); ``png`` is fast for a widget's
redraws, ``small_png`` small for pictures a notebook keeps. Not in ``simlib.tutorial.plots``:
the explorer and the headline encode figures they are handed, and importing this module
must not import matplotlib (numpy and PIL, which come with it, are imported only when a
small PNG is made).
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


class Picture:
    """A figure as a notebook shows it: a PNG, with the figure's takeaway as its text.

    ``simlib.tutorial.plots`` draws without Axes (for speed), and IPython's inline
    backend skips such figures, so notebooks wrap them: ``show(plots.timeline(trace))``.
    Where images do not render, the text form still says what the picture shows.
    """

    def __init__(self, fig: "Figure", dpi: float = 100) -> None:
        self.fig, self.dpi = fig, dpi

    def _repr_png_(self) -> bytes:
        return small_png(self.fig, self.dpi)

    def __repr__(self) -> str:
        return f"[picture] {figure_title(self.fig)}"


def show(fig: "Figure", dpi: float = 100) -> Picture:
    """Wrap a ``simlib.tutorial.plots`` figure so that a notebook cell displays it."""
    return Picture(fig, dpi)


def figure_title(fig: "Figure") -> str:
    """The takeaway sentence a ``simlib.tutorial.plots`` figure carries as its title."""
    for artist in fig.artists:
        if artist.get_gid() == "title":
            return " ".join(" ".join(artist.strings).split())
    return ""
