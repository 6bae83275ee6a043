"""The gallery's what-if widget: two graphs in one pool, replayed and read in either order.

    from simlib.tutorial import gallery_explorer
    gallery_explorer.pool_what_if()      # display it: a replay-order toggle, the fix, a picture

Each change re-simulates ``simlib.programs.gallery.shared_pool_what_if(order, copied_out)``
and redraws both graphs' blocks in the pool and the replays and reads after the captures
(``simlib.tutorial.plots.pool``: which read got which graph's bytes), titled with the
outcome and the checker's rules; the text under the controls
says what each read got against eager. Like ``simlib.tutorial.explorer``, ipywidgets and
matplotlib are imported only when a widget is made.
"""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING, Any

from ..programs.gallery import CASES, READ_AT_ONCE, READ_LATER, WhatIf, shared_pool_what_if
from .pictures import small_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SHARED_POOL = CASES["shared_pool_clobber"]
ORDER_LABELS = (("read both after both replays", READ_LATER), ("read each right after its replay", READ_AT_ONCE))


class PoolWhatIf:
    """Controls (``order``, ``copied_out``) over the shared-pool case; ``answer`` is the current
    ``WhatIf``, ``figure`` its picture, ``status`` the lines under the controls, ``box`` the widget."""

    def __init__(self, order: str = READ_LATER, copied_out: bool = False, dpi: float = 100) -> None:
        import ipywidgets as w

        self.dpi = dpi
        self.redraws = 0
        style = {"description_width": "110px", "button_width": "auto"}
        self.order = w.ToggleButtons(options=list(ORDER_LABELS), value=order, description="replay order",
                                     style=style)
        self.copied_out = w.Checkbox(value=copied_out, description="the fix: copy each output out at once",
                                     style={"description_width": "initial"}, indent=False)
        self.image = w.Image(format="png")
        self.status_html = w.HTML()
        self.box = w.VBox([self.order, self.copied_out, self.status_html, self.image])
        self.order.observe(lambda _: self.redraw(), names="value")
        self.copied_out.observe(lambda _: self.redraw(), names="value")
        self.redraw()

    @property
    def answer(self) -> WhatIf:
        return shared_pool_what_if(self.order.value, self.copied_out.value)

    @property
    def status(self) -> list[str]:
        answer = self.answer
        return [answer.summary(), *answer.reads]

    @property
    def figure(self) -> "Figure":
        from .plots.pool import pool_blocks

        run = SHARED_POOL.run(fixed=self.copied_out.value, order=self.order.value)
        return pool_blocks(run.result.trace, {n: g.id for n, g in run.result.graphs.items()},
                           takeaway=self.answer.summary())

    def redraw(self) -> None:
        """Re-simulate and redraw. Every picture is encoded the same way (small, as a saved notebook
        keeps it), so equal bytes mean an equal picture: a test can see that a control changed it."""
        self.image.value = small_png(self.figure, self.dpi)
        lines = "<br>".join(html.escape(line) for line in self.status)
        self.status_html.value = f"<div style='font-family:monospace;font-size:12px;line-height:1.4'>{lines}</div>"
        self.redraws += 1

    def _ipython_display_(self) -> None:
        """The widget, with a static copy of its picture for front ends without widgets."""
        from IPython.display import display

        bundle: dict[str, Any] = self.box._repr_mimebundle_()
        bundle["image/png"] = base64.b64encode(small_png(self.figure, self.dpi)).decode()
        bundle["text/plain"] = f"[what-if: needs a running Python kernel] {self.answer.summary()}"
        display(bundle, raw=True)

    def __repr__(self) -> str:
        return f"<PoolWhatIf {self.order.value!r} copied_out={self.copied_out.value}>"


def pool_what_if(order: str = READ_LATER, copied_out: bool = False) -> PoolWhatIf:
    """The what-if widget of notebook 07, section 6: display it."""
    if order not in (READ_LATER, READ_AT_ONCE):
        raise ValueError(f"order={order!r}: choose {READ_LATER!r} or {READ_AT_ONCE!r}")
    return PoolWhatIf(order, copied_out)
