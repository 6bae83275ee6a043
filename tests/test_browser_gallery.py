"""Notebook 07, the incident gallery, as a learner sees it in JupyterLab, driven in Chromium.

* Run All, click the what-if widget's other replay order and tick the fix: its text and picture
  must follow. Every redraw is encoded alike, so the picture's bytes are compared: they change
  with each control, and come back when the controls do.
* In the section on the 2026 family, the drafter's case shows both graphs' blocks and its wrong
  verification, and exercise 4 coaches a wrong answer (no traceback) and confirms a right one.

``tests/support/jupyterlab_session.py`` starts Chromium and JupyterLab (and says what happens
without them); screenshots go to ``out/browser/``.
"""

from __future__ import annotations

import time

import jupyterlab_session as session
import pytest

from simlib.tutorial.gallery_lab import GALLERY_LAB

pytestmark = pytest.mark.browser
pytest_plugins = ("jupyterlab_session",)    # the fixtures: browser, page, lab


def test_gallery_what_if_widget_follows_the_replay_order_and_the_fix_in_jupyterlab(lab, page):
    from playwright.sync_api import expect

    p = page.page
    lab.open(p, "07-gallery.ipynb")
    session.run_all(p)
    order = session.labelled(p, "toggle-buttons", "replay order")
    expect(order).to_have_count(1)
    box = p.locator(".widget-vbox").filter(has=order).first
    image, status = session.shown_image(p, box), box.locator(".widget-html")
    expect(status).to_contain_text("silently wrong; the checker reports graphs_clobber")
    session.assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    box.scroll_into_view_if_needed()
    session.shot(p, "lab-07-what-if-before.png", box)

    before = session.image_digest(image)
    order.locator("button", has_text="read each right after its replay").click()
    expect(order.locator("button.mod-active")).to_have_text("read each right after its replay")
    expect(status).to_contain_text("read each output before the next replay, reading the weak outputs: correct")
    expect(status).not_to_contain_text("!= eager")
    at_once = wait_for_picture(image, lambda digest: digest != before)
    assert at_once != before, "the replay order changed but the picture did not"
    session.shot(p, "lab-07-what-if-at-once.png", box)

    # Every redraw is encoded alike, so the bytes are the picture: back to the first order, the first picture.
    order.locator("button", has_text="read both after both replays").click()
    assert wait_for_picture(image, lambda digest: digest == before) == before, "the same controls, another picture"
    box.locator("input[type=checkbox]").check()
    expect(status).to_contain_text("copying each output out at once: correct; the checker reports nothing")
    fixed = wait_for_picture(image, lambda digest: digest not in (before, at_once))
    assert fixed not in (before, at_once), "the fix was ticked but the picture did not change"
    session.assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    session.shot(p, "lab-07-what-if-fixed.png", box)
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())


def wait_for_picture(image, done, timeout: float = 30) -> str:
    """The digest of the widget's picture once ``done(digest)`` holds (or the last one, at the timeout)."""
    deadline = time.monotonic() + timeout
    digest = session.image_digest(image)
    while not done(digest) and time.monotonic() < deadline:
        time.sleep(0.2)
        digest = session.image_digest(image)
    return digest


def test_gallery_2026_section_coaches_exercise_4_and_shows_the_drafter_s_shared_pool_in_jupyterlab(lab, page):
    from playwright.sync_api import expect

    right = GALLERY_LAB.expected(4)
    wrong = {**right, "weights_rebound_after_sync": right["logits_kept_without_clone"]}
    wrong_ok, wrong_text = session.check_message(GALLERY_LAB, 4, wrong)
    right_ok, right_text = session.check_message(GALLERY_LAB, 4, right)
    assert not wrong_ok and right_ok

    p = page.page
    lab.open(p, "07-gallery.ipynb")
    session.run_all(p)
    # The drafter's case: its replays, then both graphs' blocks on one address line.
    drafter = session.code_cell(p, 'case = gallery.case("drafter_shared_pool")')
    expect(drafter.locator(".jp-OutputArea")).to_contain_text("verify(logits)")
    cells = p.locator(".jp-NotebookPanel .jp-CodeCell")
    index = next(i for i in range(cells.count()) if 'gallery.case("drafter_shared_pool")' in
                 cells.nth(i).locator(".cm-content").inner_text())
    pool = next(cells.nth(i) for i in range(index, cells.count())
                if cells.nth(i).locator(".cm-content").inner_text().strip() == "show(pictures['pool'])")
    picture = pool.locator(".jp-OutputArea img")
    expect(picture).to_have_count(1)
    p.wait_for_function("img => img.complete && img.naturalWidth > 500", arg=picture.element_handle())
    replays = next(cells.nth(i) for i in range(index, cells.count())
                   if cells.nth(i).locator(".cm-content").inner_text().startswith("print('\\n'.join(run.computed()))"))
    expect(replays.locator(".jp-OutputArea")).to_contain_text("!= eager target_head(target_layers(tok5))")
    pool.scroll_into_view_if_needed()
    session.shot(p, "lab-07-drafter-pool.png", pool)

    check = session.code_cell(p, "gallery_lab.check(4, answer_4)")
    output = check.locator(".jp-OutputArea")
    expect(output).to_contain_text("not answered yet")
    session.answer_and_check(p, f"answer_4 = {wrong!r}", number=4)
    expect(output).to_contain_text(wrong_text)
    expect(output).to_contain_text("Read: notebook 07-gallery, section '8. The family in 2026'")
    for traceback in ("Traceback", "gallery_lab.py", "AssertionError"):
        expect(output).not_to_contain_text(traceback)
    session.answer_and_check(p, f"answer_4 = {right!r}", number=4)
    expect(output).to_contain_text(right_text)
    session.kernel_idle(p)
    check.scroll_into_view_if_needed()
    session.shot(p, "lab-07-exercise-4-right.png")
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())
