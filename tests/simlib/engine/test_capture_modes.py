"""Stories about capture modes: what a capture forbids on streams outside it.

A "missing fork": the alternate stream never waits on the capture, so its
work is not captured. In PyTorch's default mode (``global``) its first new
block is a ``cudaMalloc``, which the mode forbids: "operation not permitted
when stream is capturing", and the capture is invalidated. In ``relaxed`` mode
the work runs eagerly, and the join then makes the graph depend on uncaptured
work: ``cudaErrorStreamCaptureIsolation``.
"""

import pytest
from capture_errors import raises_first

from simlib import Runtime, StreamCaptureInvalidated, StreamCaptureIsolation, StreamCaptureUnsupported
from simlib.trace import Capture, DeviceSpan


def missing_fork(rt: Runtime, mode: str, *, warm_alt: bool = False) -> None:
    main, alt = rt.current_stream, rt.Stream("alt")
    x = rt.from_host((4, 8), "x", value="x1")
    if warm_alt:                      # alt has used (and cached) a block of this size before
        with rt.stream(alt):
            rt.release(rt.empty((4, 8), "warm"))
    with rt.graph(main, capture_error_mode=mode):
        y = rt.op("norm", x, out_shape=(4, 8))
        with rt.stream(alt):          # no alt.wait_stream(main): alt is not part of the capture
            rt.op("shared", y, out_shape=(4, 8))
        main.wait_stream(alt)


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_a_missing_fork_fails_at_the_first_new_block_in_the_strict_modes(rt, mode):
    with raises_first(StreamCaptureUnsupported, match="operation not permitted when stream is capturing"):
        missing_fork(rt, mode)
    end = [r for r in rt.trace.of(Capture) if r.op == "end"][0]
    assert end.error == "cudaErrorStreamCaptureUnsupported"    # the first error, as the recorder keeps it


def test_in_relaxed_mode_the_alt_work_runs_eagerly_and_the_join_is_isolation(rt):
    with raises_first(StreamCaptureIsolation, match="recorded outside the capture on 'alt'"):
        missing_fork(rt, "relaxed")
    eager_on_alt = [r for r in rt.trace.of(DeviceSpan) if r.stream == "alt" and r.phase == "eager"]
    assert eager_on_alt                                     # it ran, during the capture, uncaptured


def test_with_a_cached_block_no_cudamalloc_is_needed_and_the_join_fails_first(rt):
    with raises_first(StreamCaptureIsolation):
        missing_fork(rt, "global", warm_alt=True)


def test_strict_modes_forbid_querying_an_uncaptured_event_relaxed_allows_it(rt):
    side = rt.Stream("side")
    done = side.record_event()
    with raises_first(StreamCaptureUnsupported, match="capture mode 'global'"):
        with rt.graph(rt.current_stream):
            done.query()
    with rt.graph(rt.current_stream, capture_error_mode="relaxed") as g:
        assert done.query()
    assert g.ok


def test_after_a_strict_mode_error_the_capture_is_invalidated(rt):
    side = rt.Stream("side")
    side.record_event()
    with pytest.raises(StreamCaptureInvalidated):
        with rt.graph(rt.current_stream):
            with pytest.raises(StreamCaptureUnsupported):
                side.synchronize()
            rt.op("later", rt.empty((1,), "a"), out_shape=(1,))


def test_an_unknown_capture_mode_is_refused_with_the_valid_ones(rt):
    with pytest.raises(ValueError, match="'global', 'thread_local', 'relaxed'"):
        with rt.graph(capture_error_mode="lenient"):
            pass
