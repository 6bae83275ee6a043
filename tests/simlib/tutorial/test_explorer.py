"""The tutorial's explorer, driven headless: controls in, pictures and text out."""

from __future__ import annotations

import base64
import io
import subprocess
import sys

import pytest

from gpu_demo.lab import results
from simlib.glossary import UNORDERED_MEANS
from simlib.programs.spec import MoEConfig
from simlib.trace import Capture, Mutation
from simlib.tutorial import describe, explorer, pictures, simulated, tables
from simlib.tutorial.pictures import small_png

INCIDENT = MoEConfig(order="routed_first", shared_mode="static_buffer", dispose="always")


def capture_steps(result):
    marks = {r.op: r.step for r in result.trace.of(Capture)}
    return marks["begin"], marks["end"]


def dispose_step(result):
    return next(m.step for m in result.trace.of(Mutation) if m.graph is not None)


# ---------------------------------------------------------------- without widgets
def test_importing_the_explorer_pulls_in_neither_widgets_nor_matplotlib():
    code = ("import sys, simlib.tutorial.explorer; "
            "bad = [m for m in ('ipywidgets', 'IPython', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_scenarios_are_simulated_once_per_configuration():
    assert simulated.scenario(INCIDENT) is simulated.scenario(INCIDENT.with_())
    assert simulated.scenario(INCIDENT) is not simulated.scenario(INCIDENT.with_(order="shared_first"))


def test_landmarks_put_the_dispose_before_the_shared_expert_only_when_routed_goes_first():
    routed = describe.landmarks(simulated.scenario(INCIDENT))
    shared = describe.landmarks(simulated.scenario(INCIDENT.with_(order="shared_first")))
    for marks in (routed, shared):
        assert list(marks)[0] == "capture_begin" and list(marks)[-1] == "capture_end"
        assert marks["capture_begin"] < marks["fork"] < marks["join"] < marks["capture_end"]
    assert routed["dispose"] < routed["first_shared"]
    assert shared["first_shared"] < shared["dispose"]
    assert routed["dispose"] == dispose_step(simulated.scenario(INCIDENT))


def test_describe_step_says_what_the_host_did():
    result = simulated.scenario(INCIDENT)
    marks = describe.landmarks(result)
    text = describe.describe_step(result.trace, marks["dispose"])
    assert text.startswith(f"host step {marks['dispose']}: x.set_:") and "-> 0x0 (empty)" in text
    skipped = describe.describe_step(result.trace, marks["first_shared"])
    assert "skip shared.gate_up on stream alt" in skipped and "x_rows=0x0 (empty)" in skipped
    assert "waits for stream main's event" in describe.describe_step(result.trace, marks["fork"])


def test_gpu_table_shows_provenance_the_measured_cells_and_the_simulators_agreement(tmp_path):
    text = tables.gpu_table(results.path("matrix-h200"))
    for word in ("NVIDIA H200", "driver", "torch", "date_utc", "command", "matrix-h200.json"):
        assert word in text
    assert "silent_wrong (err 0.67)" in text
    assert "capture_error:shape_mismatch" in text and "illegal_address" in text
    assert "its verdict agrees with 6 of 6 measured cells" in text
    # shared first: the H200's replays were correct, the simulator's verdict is unordered
    assert "shared_first/static_buffer/always: unordered (the GPU's replays: correct)" in text
    assert "No GPU results recorded" in tables.gpu_table(tmp_path / "missing.json")


def test_fix_table_flags_the_reorder_fix_and_clears_the_robust_ones():
    fixes = {"none": INCIDENT, "reorder": INCIDENT.with_(order="shared_first"),
             "skip": INCIDENT.with_(dispose="skip_in_capture")}
    lines = tables.fix_table(fixes).splitlines()
    assert lines[1].split() == ["fix", "plain", "static_buffer", "raw_kernel"]
    rows = {line.split()[0]: line for line in lines[3:6]}
    assert "capture fails: shape_mismatch; no graph" in rows["none"]
    assert "silently wrong; err 1,2" in rows["none"] and "illegal address; err 1,2" in rows["none"]
    assert rows["reorder"].count("unordered: a race; warn 4") == 3
    assert rows["skip"].count("correct; clean") == 3
    costs = tables.cost_table(fixes).splitlines()
    assert all(word in costs[0] for word in ("replay µs", "graph nodes", "pool KiB"))
    incident, reorder, skip = (line.split() for line in costs[2:])
    assert int(incident[-2]) < int(skip[-2])             # the incident lost the shared nodes
    assert int(reorder[-2]) == int(skip[-2])


def test_outcome_table_is_the_simulators_three_by_two():
    lines = tables.outcome_table(INCIDENT).splitlines()
    assert lines[0].split()[:4] == ["shared", "expert", "consumes", "x"]
    cells = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert cells["plain"] == ["unordered", "(err", "0.00)", "capture_error:shape_mismatch"]
    assert cells["static_buffer"][-3:-1] == ["silent_wrong", "(err"]
    assert float(cells["static_buffer"][-1].rstrip(")")) > 0.1
    assert cells["raw_kernel"][-1] == "illegal_address"


# ---------------------------------------------------------------- pictures
def test_picture_shows_a_png_and_says_its_takeaway_as_text():
    plots = pytest.importorskip("simlib.tutorial.plots")
    from PIL import Image

    fig = plots.captured_graph(simulated.scenario(INCIDENT))
    picture = pictures.show(fig)
    assert repr(picture).startswith("[picture] x.set_(empty) at host step")
    image = Image.open(io.BytesIO(picture._repr_png_()))
    assert image.mode == "P" and len(image.getcolors()) <= 256
    rgb = image.convert("RGB")
    assert rgb.getpixel((2, 2)) == (255, 255, 255)       # white stays exactly white
    found = {c for _, c in rgb.getcolors(1 << 20)}
    assert (213, 94, 0) in found                           # the danger colour survives


# ---------------------------------------------------------------- the widget
@pytest.fixture
def ex():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    return explorer.dispose_bug_explorer(INCIDENT, step="dispose")


def test_slider_spans_the_host_steps_of_the_capture(ex):
    result = simulated.scenario(INCIDENT)
    assert (ex.slider.min, ex.slider.max) == capture_steps(result)
    assert (ex.play.min, ex.play.max) == capture_steps(result)
    assert ex.step == dispose_step(result)
    assert ex.config == INCIDENT and ex.redraws == 1


def test_moving_the_slider_redraws_into_the_same_figure(ex):
    fig, png, title = ex.figure, ex.image.value, ex.title
    ex.slider.value = ex.slider.max
    assert ex.redraws == 2
    assert ex.figure is fig                    # reused, not rebuilt
    assert ex.image.value != png
    assert ex.title != title
    assert "came before 3 launches (shared)" in ex.title
    assert ex.status[1].startswith(f"host step {ex.slider.max}: end the capture")
    ex.slider.value = ex.slider.min
    assert ex.title == "Nothing captured yet" and ex.redraws == 3


def test_before_the_dispose_every_launch_froze_a_live_pointer(ex):
    ex.slider.value = ex.landmarks["dispose"] - 1
    assert ex.title.startswith("The capture froze ") and ex.title.endswith("every pointer live")
    ex.slider.value = ex.landmarks["dispose"]
    assert "every launch so far froze a live x" in ex.title


def test_changing_the_order_resimulates_and_refits_the_slider(ex):
    ex.controls["order"].value = "shared_first"
    result = simulated.scenario(INCIDENT.with_(order="shared_first"))
    assert ex.config.order == "shared_first" and ex.redraws == 2
    assert (ex.slider.min, ex.slider.max) == capture_steps(result)
    assert ex.status[0] == f"shared_first/static_buffer/always: unordered: {UNORDERED_MEANS}"
    assert ex.status[-1] == "checker: 1 warning (rule 4 reuse_after_free)"


def test_each_control_maps_onto_the_configuration(ex):
    ex.controls["shared_mode"].value = "raw_kernel"
    ex.controls["dispose"].value = "own_buffer"
    ex.controls["clone"].value = True
    assert ex.config == INCIDENT.with_(shared_mode="raw_kernel", dispose="own_buffer", clone=True)
    assert ex.redraws == 4


def test_set_changes_several_controls_with_one_redraw(ex):
    ex.set(order="shared_first", shared_mode="plain", step="first_shared")
    assert ex.redraws == 2
    assert ex.config == INCIDENT.with_(order="shared_first", shared_mode="plain")
    assert ex.step == ex.landmarks["first_shared"]
    ex.set(step=None)
    assert ex.step == ex.slider.max
    with pytest.raises(ValueError, match="no such landmark"):
        ex.set(step="nowhere")
    with pytest.raises(ValueError, match="unknown control"):
        ex.set(colour="red")


def test_a_value_a_control_does_not_take_is_one_clear_line_that_names_the_choices(ex):
    before = (ex.config, ex.step, ex.redraws)
    with pytest.raises(ValueError) as error:
        ex.set(order="bogus", dispose="never")
    assert str(error.value) == "order='bogus' is not one of its values; use one of 'shared_first', 'routed_first'"
    with pytest.raises(ValueError, match=r"clone=1 is not one of its values; use one of False, True"):
        ex.set(clone=1)
    assert (ex.config, ex.step, ex.redraws) == before   # nothing half-set, nothing redrawn


def test_a_failed_capture_still_has_a_slider_and_says_why(ex):
    ex.set(shared_mode="plain", step=None)
    result = simulated.scenario(INCIDENT.with_(shared_mode="plain"))
    assert (ex.slider.min, ex.slider.max) == capture_steps(result)
    assert ex.title.startswith("The capture failed (aborted)")
    assert any("shape_mismatch" in line for line in ex.status)


def test_the_graph_view_draws_the_captured_graph(ex):
    ex.controls["view"].value = "graph"
    assert ex.view == "graph"
    assert any(a.get_gid() == "graph-nodes" for a in ex.figure.artists)
    ex.slider.value = ex.slider.max
    assert "the host skipped them" in ex.title


def test_the_fixes_explorer_starts_on_the_graph_of_a_fix():
    pytest.importorskip("ipywidgets")
    fx = explorer.fixes_explorer()
    assert fx.view == "graph" and fx.config.dispose == "skip_in_capture"
    assert fx.step == fx.slider.max
    assert fx.status[-1] == "checker: clean"


def test_every_redraw_is_timed_for_the_benchmark(ex):
    for step in range(ex.slider.min, ex.slider.max + 1):
        ex.slider.value = step
    for order in ("shared_first", "routed_first"):
        ex.controls["order"].value = order
    times = ex.redraw_ms[1:]          # the first draw warms caches and encodes small
    # How fast they are is simlib.bench's widget_redraw_ms (target 150 ms), not a test's: under load a
    # wall-clock bound fails on a correct program.
    assert len(times) >= ex.slider.max - ex.slider.min + 2 and all(t > 0 for t in times)


def test_displaying_it_gives_one_picture_the_widget_or_its_static_copy(ex, monkeypatch, capsys):
    display = pytest.importorskip("IPython.display")
    shown = []
    monkeypatch.setattr(display, "display", lambda obj, **kw: shown.append((obj, kw)))
    ex._ipython_display_()
    (bundle, kw), = shown
    assert kw == {"raw": True}
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == small_png(ex.figure, ex.dpi)
    assert bundle["text/plain"] == (f"[explorer: needs a running Python kernel] {INCIDENT.name}, "
                                    f"pointers at host step {ex.step}: {ex.title}")
    shown.clear()
    ex.snapshot()                              # the same view: its picture is already shown
    assert capsys.readouterr().out.splitlines()[0] == \
        "routed_first/static_buffer/always: silently wrong"
    assert shown == []
    ex.set(step=None)
    ex.snapshot()                              # another view: now it shows the picture
    (picture, _), = shown
    assert isinstance(picture, pictures.Picture) and picture.fig is ex.figure
