"""Capturing a graph: ``rt.graph()``, and the rules every call must pass while a capture is underway.

Which calls a capture forbids, on which streams and in which capture mode,
is decided here (``_check_capture_ok``, ``_refuse_unsafe``); the first error
invalidates the capture (``_fail``), as in CUDA.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from ...trace import Capture as CaptureRecord
from ..errors import (
    CaptureError,
    StreamCaptureImplicit,
    StreamCaptureInvalidated,
    StreamCaptureUnjoined,
    StreamCaptureUnsupported,
)
from ..generators import Generator
from ..graph import CAPTURE_MODES, GLOBAL, RELAXED, Capture, CapturedGraph
from ..stream import Stream
from ..tensor import TensorHandle

CAPTURE_STREAM = "capture"    # torch.cuda.graph's one side stream for every capture


class CaptureCalls:
    """Beginning and ending captures, and refusing what a capture forbids.

    Mixed into ``simlib.engine.runtime.Runtime``, whose state (``trace``, ``streams``, ``_capture``, ...)
    and host clock (``_host``) it uses.
    """

    def _capturing(self, s: Stream) -> Capture | None:
        cap = self._capture
        return cap if cap is not None and cap.capturing(s) else None

    def _check_capture_ok(self, s: Stream, what: str, subject: str = "") -> Capture | None:
        """Refuse work on a stream whose capture was already invalidated."""
        cap = self._capture
        if cap is None:
            return None
        if subject:
            what = f"{what} {subject!r}"
        cap = cap if cap.capturing(s) else None
        if cap is not None and cap.error is not None:
            raise StreamCaptureInvalidated(
                f"{what} on stream {s.name!r}: the capture of graph {cap.graph.label!r} was "
                f"invalidated earlier by {cap.error.code}; every captured operation fails "
                "until the capture ends. Fix the first error.")
        if cap is None and s.legacy and self._capture is not None and any(
                self.streams[n].blocking for n in self._capture.frontier):
            self._fail(StreamCaptureImplicit(
                f"{what} on the legacy default stream would implicitly wait for a blocking "
                "stream that is being captured. Issue the work on a non-blocking stream."))
        return cap

    def _fail(self, error: CaptureError) -> None:
        """Invalidate the capture in progress with its first error, and raise it."""
        if self._capture is not None and self._capture.error is None:
            self._capture.error = error
        raise error

    def _refuse_unsafe(self, what: str) -> None:
        """Fail a potentially unsafe call made while a strict-mode capture is underway."""
        cap = self._capture
        if cap is not None and cap.mode != RELAXED:
            self._fail(StreamCaptureUnsupported(
                f"{what} while graph {cap.graph.label!r} is being captured in capture mode "
                f"{cap.mode!r}: operation not permitted when stream is capturing. That mode "
                "forbids this thread's potentially unsafe calls even on a stream outside the "
                "capture. Fork the stream into the capture first (alt.wait_stream(main)) so its "
                "work is captured, or move the call out of the captured region."))

    def is_current_stream_capturing(self) -> bool:
        """``torch.cuda.is_current_stream_capturing()``: is the current stream being captured?

        Code that must act differently under capture (skip a dispose, create a
        buffer before it) asks this; replays never ask it again.
        """
        return self._capturing(self.current_stream) is not None

    @contextmanager
    def graph(self, stream: Stream | None = None, *, label: str = "graph",
              inputs: Sequence[TensorHandle] = (),
              capture_error_mode: str = GLOBAL, pool: str | None = None,
              generators: Sequence[Generator] = ()) -> Iterator[CapturedGraph]:
        """``with torch.cuda.graph(g, pool=..., stream=..., capture_error_mode=...)``: capture everything issued inside.

        Like PyTorch, it synchronises the device first and captures on its side
        stream unless ``stream`` is given: one stream (``capture``) for every
        graph, as ``torch.cuda.graph.default_capture_stream`` is. That stream is
        current for the duration. ``inputs`` names the static input buffers that
        replays must refresh (used by the checker's stale-input rule).
        ``capture_error_mode`` says which calls are forbidden meanwhile on
        streams outside the capture (``simlib.engine.graph.CAPTURE_MODES``). ``pool``
        (``other.pool()``) captures into another graph's memory pool instead of
        a private one, as serving engines do for one graph per batch size.
        ``generators`` are registered with the graph (``g.register_generator_state(gen)``
        before capturing): every replay advances them, as it does the default generator.
        Host objects' ints and bools the captured code changes are recorded when it ends
        (``HostState``).

        When a capture error (``Unsupported``, ``Isolation``, ...) leaves the
        block, ending the capture raises ``StreamCaptureInvalidated`` over it,
        as ``capture_end`` in ``torch.cuda.graph.__exit__`` does: the first
        error is its ``__context__`` (``simlib.engine.errors.first_error``). Any other
        exception ends the capture and goes on.
        """
        if capture_error_mode not in CAPTURE_MODES:
            raise ValueError(f"capture_error_mode={capture_error_mode!r} is not a valid choice; use "
                             "one of: " + ", ".join(repr(m) for m in CAPTURE_MODES))
        if self._capture is not None:
            raise ValueError("simlib models one capture at a time; end the capture of "
                             f"{self._capture.graph.label!r} before starting another")
        if pool is not None and pool not in {g.pool() for g in self.graphs}:
            raise ValueError(f"pool={pool!r} is not the pool of a captured graph; pass other.pool() of a "
                             f"graph captured before (pools now: {sorted({g.pool() for g in self.graphs})})")
        self.synchronize()
        if stream is None:
            stream = self.streams.get(CAPTURE_STREAM) or self.Stream(CAPTURE_STREAM)
        g = self._begin_capture(stream, label, capture_error_mode, pool, tuple(generators))
        previous, self.current_stream = self.current_stream, stream
        try:
            yield g
        except BaseException:
            self.current_stream = previous
            invalidated = self._end_capture(g, inputs, failing=True)
            if invalidated is not None:
                raise invalidated       # over the first error, which stays its __context__
            raise
        self.current_stream = previous
        self._end_capture(g, inputs, failing=False)

    def _begin_capture(self, stream: Stream, label: str, mode: str = GLOBAL,
                       pool: str | None = None, generators: tuple[Generator, ...] = ()) -> CapturedGraph:
        step = self._host(self.profile.host_op_us)
        if stream.legacy:
            raise StreamCaptureUnsupported(
                "CUDA graphs must be captured on a non-default stream (PyTorch refuses the "
                "legacy default stream, which synchronises implicitly). Capture on rt.Stream(...) "
                "or let rt.graph() create a side stream.")
        g = CapturedGraph(self, len(self.graphs), label, stream.name, pool)
        self.graphs.append(g)
        self._capture = Capture(g, stream, {stream.name: ()}, mode=mode, generators=generators,
                                host_before=self._host_values())
        for obj in self._host_objects:
            obj._changed_at.clear()
        self.trace.records.append(CaptureRecord(step, self.now, "begin", g.id, stream.name, pool=pool or "",
                                                generators=tuple(gen.name for gen in generators)))
        return g

    def _end_capture(self, g: CapturedGraph, inputs: Sequence[TensorHandle], *,
                     failing: bool) -> StreamCaptureInvalidated | None:
        """End the capture; raise what ending it raises. ``failing``: the captured code raised,
        and the error ending it raises over that one is returned for the caller to raise."""
        cap = self._capture
        assert cap is not None and cap.graph is g
        step = self._host(self.profile.host_op_us)
        first = cap.error
        error: CaptureError | None = None
        if first is not None:
            error = StreamCaptureInvalidated(
                f"operation failed due to a previous error during capture: ending the capture of "
                f"{g.label!r} (capture_end, in torch.cuda.graph's __exit__) raised this over the "
                f"first error, its cause, which Python shows above it. Fix that one: {first}")
        elif not failing:
            unjoined = cap.unjoined()
            if unjoined:
                error = StreamCaptureUnjoined(
                    f"capture of {g.label!r} ended on {cap.origin.name!r} while stream(s) "
                    f"{unjoined} still had captured work the origin stream never waited for. "
                    f"Join them back first: {cap.origin.name}.wait_stream({unjoined[0]}).")
        self._capture = None
        self._release_held(cap)
        self._record_host_changes(cap, step)
        g.inputs = tuple(inputs)
        g.draws = dict(cap.draws)
        g.ok = error is None and not failing
        recorded = first or error      # what the recorder keeps too: the first error of the capture
        self.trace.records.append(CaptureRecord(
            step, self.now, "end", g.id, cap.origin.name, tuple(t.ptr for t in inputs),
            recorded.code if recorded else ("aborted" if failing else None), pool=g.pool_shared or "",
            generators=tuple(gen.name for gen in cap.generators)))
        if error is not None and not failing:
            raise error
        return error if isinstance(error, StreamCaptureInvalidated) else None
