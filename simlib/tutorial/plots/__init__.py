"""Pictures of a trace: what the host did, what the capture froze, what replays ran.

This package is the only part of simlib that imports matplotlib (``import
simlib`` does not import it). Every picture takes plain data (a ``Trace``, or a
``ScenarioResult`` where the replayed values are needed) and returns a
matplotlib ``Figure``; pass ``fig=`` to redraw into an existing figure (the
tutorial's widgets do). ``step=`` shows the state only up to that host step, so
a slider can walk through the capture. Without ``takeaway=``, a picture's title
is the sentence ``takeaways`` derives from what it shows.

One module per picture (``timeline``, ``graph``, ``pointers``, ``comparison``),
drawn with ``kit`` (labels, panels, legends, titles) in ``palette``'s colours.
"""

from .captured_graph import captured_graph
from .comparison import side_by_side
from .palette import DANGER, GREY
from .pointers import pointer_table
from .timeline import timeline

__all__ = ["timeline", "captured_graph", "pointer_table", "side_by_side", "DANGER", "GREY"]
