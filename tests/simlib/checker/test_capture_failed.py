"""Rule 0, ``capture_failed``: a capture that ended with an error is reported first and alone."""

from __future__ import annotations

from checker_stories import Recorder, rules, scenario_findings, severities

from simlib.checker import ERROR, check, format_report
from simlib.programs import scenarios
from simlib.programs.spec import MoEConfig


def test_a_failed_capture_is_reported_first_and_alone():
    rec = Recorder()
    buf = rec.empty("buf")
    rec.begin()
    rec.wait_stream("alt", "main")
    rec.launch("writer", writes=[buf], stream="alt")
    rec.launch("reader", reads=[buf], writes=[rec.empty("out")])       # unordered: a race ...
    rec.end(error="CUDA error: operation not permitted when stream is capturing "
                  "(cudaErrorStreamCaptureInvalidated)")               # ... in a graph that never was
    findings = rec.check()
    assert rules(findings) == [(0, "capture_failed", ERROR)]
    why = findings[0].why
    assert "cudaErrorStreamCaptureInvalidated" in why and "There is no graph" in why
    assert "invalidated it" in why                                      # what the error means
    assert format_report(findings).startswith("ERROR rule 0 (capture_failed)")


def test_a_failed_capture_comes_before_findings_at_earlier_steps():
    rec = Recorder()
    rec.begin()
    x = rec.empty("x")
    rec.launch("norm", writes=[x])
    rec.dispose(x)
    rec.launch("use", reads=[x], writes=[rec.empty("y")])
    rec.end()                                          # graph 0: rules 1 and 2
    rec.begin(graph=1)
    rec.end(error="cudaErrorStreamCaptureUnjoined")
    findings = rec.check()
    assert [f.rule for f in findings] == [0, 1, 2]
    assert findings[0].step > findings[1].step and "main.wait_stream(alt)" in findings[0].fix


def test_an_unknown_capture_error_gets_the_glossarys_meaning():
    rec = Recorder()
    rec.begin()
    rec.end(error="RuntimeError: something odd")
    [failed] = rec.check()
    assert "'RuntimeError: something odd'" in failed.why
    assert "the capture itself failed, so there is no graph to replay" in failed.why


def test_routed_first_plain_fails_at_capture_with_nothing_frozen_wrong():
    result = scenarios.run(MoEConfig(order="routed_first", shared_mode="plain"))
    assert result.outcome == "capture_error:shape_mismatch"
    [failed] = check(result.trace)
    assert (failed.rule, failed.code, failed.severity) == (0, "capture_failed", ERROR)
    assert "There is no graph" in failed.why and "emptied 'x'" in failed.why


def test_an_unjoined_alt_stream_fails_the_capture_and_no_race_is_reported():
    findings = scenario_findings(MoEConfig(order="shared_first", capture_fault="unjoined"))
    assert severities(findings) == [(0, ERROR)]                # no rule 3/4 on a graph that never existed
    assert "cudaErrorStreamCaptureUnjoined" in findings[0].why
    assert "main.wait_stream(alt)" in findings[0].fix
