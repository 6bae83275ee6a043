"""What a learner sees: the tutorial's widgets in JupyterLab, driven in Chromium.

nbval proves that the notebooks' cells execute; it cannot see whether the ipywidgets
render and respond in JupyterLab, which is where they usually break (front-end and kernel
versions that disagree, a missing lab extension). These tests drive Debian's Chromium
through Playwright (``tests/support/jupyterlab_session.py`` starts it, and JupyterLab on a
temporary copy of ``notebooks/``):

* the static HTML edition (``scripts/build_html.py``, what ``make html`` runs, built into a
  temporary folder and served on loopback): the contents list the notebooks in reading order,
  every page loads without console errors, failed or off-machine requests, shows each picture
  once, and the widgets render from their saved state;
* notebook 03 in JupyterLab: Run > Run All Cells, find the explorer's controls, move the
  host-step slider with the keyboard and click the order toggle; the picture must change;
* notebook 06 in JupyterLab: type a wrong, then a right answer into exercise 1 and run its
  self-check; the coaching (and no traceback), then the confirmation, must show.

Notebook 07 (the gallery) has its own module, ``test_browser_gallery.py``. Screenshots (and the
JupyterLab log) are written to ``out/browser/``, among them every picture of the HTML edition as
a page shows it (``html-<notebook>-picture-<n>.png``).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
import time

import pytest
from jupyterlab_session import (
    NOTEBOOKS,
    ROOT,
    answer_and_check,
    assert_no_widget_failures,
    check_message,
    code_cell,
    image_digest,
    kernel_idle,
    labelled,
    run_all,
    shot,
    shown_image,
    unavailable,
)

pytest_plugins = ("jupyterlab_session",)    # the fixtures: browser, page, lab
pytestmark = pytest.mark.browser


# ----------------------------------------------------------------- the static HTML edition
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def html_edition(browser, tmp_path_factory):
    """``scripts/build_html.py`` into a temporary folder, served on a free loopback port."""
    if shutil.which("npm") is None and not (ROOT / "out" / "cache" / "npm").is_dir():
        unavailable("the HTML edition needs npm once, to fetch the widget JavaScript: "
                     "apt-get install -y npm")
    out = tmp_path_factory.mktemp("edition") / "html"
    build = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_html.py"),
                            "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, f"build_html.py failed:\n{build.stdout}\n{build.stderr}"
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_html_edition_pages_load_offline_without_errors_and_show_the_widgets(html_edition, page):
    from playwright.sync_api import expect

    sys.path.insert(0, str(ROOT / "scripts"))
    from build_html import reading_order, repeated_pictures

    out, url = html_edition
    p = page.page
    p.goto(f"{url}/index.html")
    links = p.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert links == [f"{nb.stem}.html" for nb in sorted(NOTEBOOKS.glob("*.ipynb"), key=reading_order)]
    assert links.index("06-lab.html") < links.index("06-lab-solutions.html")
    assert not page.problems(), page.problems()

    for link in links:
        assert repeated_pictures((out / link).read_text()) == [], f"{link} shows a picture twice"
        p.goto(f"{url}/{link}", wait_until="load")
        views = p.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            # embed-amd.js puts each view in a div.widget-subarea before its script.
            expect(p.locator(".widget-subarea")).to_have_count(views)
            expect(p.locator(".widget-subarea .jupyter-widgets").first).to_be_visible()
        p.wait_for_load_state("networkidle")
        assert_no_widget_failures(p, p.locator("body"))
        assert not page.problems(), f"{link}: {page.problems()}"
        pictures = p.locator(".jp-OutputArea-output img")
        for i in range(pictures.count()):
            picture = pictures.nth(i)
            picture.scroll_into_view_if_needed()
            shot(p, f"html-{link.removesuffix('.html')}-picture-{i}.png", picture)

    p.goto(f"{url}/03-the-dispose-bug.html", wait_until="load")
    order, slider = labelled(p, "toggle-buttons", "issue order"), labelled(p, "slider", "host step")
    expect(order).to_have_count(1)
    expect(slider).to_have_count(1)
    expect(order.locator("button.mod-active")).to_have_count(1)
    image = p.locator(".widget-subarea img.widget-image").first
    p.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    box = p.locator(".widget-subarea").filter(has=order).first
    box.scroll_into_view_if_needed()
    shot(p, "html-03-explorer.png", box)
    p.goto(f"{url}/07-gallery.html", wait_until="load")
    what_if = labelled(p, "toggle-buttons", "replay order")
    expect(what_if).to_have_count(1)
    expect(what_if.locator("button.mod-active")).to_have_text("read both after both replays")
    box = p.locator(".widget-subarea").filter(has=what_if).first
    expect(box.locator(".widget-html")).to_contain_text("silently wrong")
    box.scroll_into_view_if_needed()
    shot(p, "html-07-what-if.png", box)
    p.goto(f"{url}/index.html")
    shot(p, "html-index.png")
    assert not page.problems(), page.problems()


# ----------------------------------------------------------------- notebook 03
def test_dispose_bug_explorer_renders_and_redraws_in_jupyterlab(lab, page):
    from playwright.sync_api import expect

    p = page.page
    lab.open(p, "03-the-dispose-bug.ipynb")
    run_all(p)

    # The explorer's VBox: the "issue order" toggle buttons, the "host step" slider, the picture.
    order, slider = labelled(p, "toggle-buttons", "issue order"), labelled(p, "slider", "host step")
    box = p.locator(".widget-vbox").filter(has=order).filter(has=slider).first
    expect(order).to_have_count(1)
    expect(slider).to_have_count(1)
    image = shown_image(p, box)
    status = box.locator(".widget-html")
    expect(status).to_contain_text("routed_first")
    assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    box.scroll_into_view_if_needed()
    shot(p, "lab-03-explorer-before.png", box)

    readout = slider.locator(".widget-readout")
    step_before = int(readout.inner_text())
    src_before, bytes_before = image.get_attribute("src"), image_digest(image)
    status_before = status.inner_text()
    assert f"host step {step_before}:" in status_before

    # Move the slider from its handle with the keyboard, three steps (right, unless at the end).
    handle = slider.locator(".noUi-handle")
    right = step_before + 3 <= float(handle.get_attribute("aria-valuemax"))
    step_after = step_before + 3 if right else step_before - 3
    handle.focus()
    for _ in range(3):
        handle.press("ArrowRight" if right else "ArrowLeft")
    expect(readout).to_have_text(str(step_after))
    expect(status).to_contain_text(f"host step {step_after}:")
    expect(image).not_to_have_attribute("src", src_before)
    assert image_digest(image) != bytes_before, "the slider moved but the picture did not change"
    shot(p, "lab-03-explorer-after-slider.png", box)

    # The order toggle re-simulates: shared expert first is another capture, another picture.
    bytes_slid = image_digest(image)
    order.locator("button", has_text="shared expert first").click()
    expect(order.locator("button.mod-active")).to_have_text("shared expert first")
    expect(status).to_contain_text("shared_first")
    deadline = time.monotonic() + 30
    while image_digest(image) == bytes_slid and time.monotonic() < deadline:
        time.sleep(0.2)
    assert image_digest(image) != bytes_slid, "the order changed but the picture did not"
    assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    shot(p, "lab-03-explorer-shared-first.png", box)
    shot(p, "lab-03-page.png")
    # A front end that cannot load a widget's model or view says so in the console.
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())


# ----------------------------------------------------------------- notebook 06
def test_lab_self_check_explains_a_wrong_answer_and_confirms_a_right_one(lab, page):
    from notebook_lab import LAB
    from playwright.sync_api import expect

    right = LAB.expected(1)
    wrong = {**right, "shared_first": "correct"}     # the answer the tutorial used to teach
    wrong_ok, wrong_text = check_message(LAB, 1, wrong)
    right_ok, right_text = check_message(LAB, 1, right)
    assert not wrong_ok and right_ok

    p = page.page
    lab.open(p, "06-lab.ipynb")
    run_all(p)
    check = code_cell(p, "lab.check(1, answer_1)")
    output = check.locator(".jp-OutputArea")
    expect(output).to_contain_text("not answered yet")

    answer_and_check(p, f"answer_1 = {wrong!r}")
    expect(output).to_contain_text(wrong_text)
    expect(output).to_contain_text("Read: notebook")
    for traceback in ("Traceback", "lab.py", "AssertionError"):   # coaching, not a stack
        expect(output).not_to_contain_text(traceback)
    check.scroll_into_view_if_needed()
    shot(p, "lab-06-wrong-answer.png")

    answer_and_check(p, f"answer_1 = {right!r}")
    expect(output).to_contain_text(right_text)
    expect(output).not_to_contain_text("not yet")
    kernel_idle(p)
    check.scroll_into_view_if_needed()
    shot(p, "lab-06-right-answer.png")
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())


