"""What a learner sees: the tutorial's widgets in JupyterLab, driven in Chromium.

nbval proves that the notebooks' cells execute; it cannot see whether the ipywidgets
render and respond in JupyterLab, which is where they usually break (front-end and kernel
versions that disagree, a missing lab extension). These tests start JupyterLab headless
on a free loopback port, on a temporary copy of ``notebooks/`` (the committed notebooks
are never modified), and drive Debian's Chromium through Playwright:

* the static HTML edition (``scripts/build_html.py``, what ``make html`` runs, built into a
  temporary folder and served on loopback): the contents list the notebooks in reading order,
  every page loads without console errors, failed or off-machine requests, shows each picture
  once, and the widgets render from their saved state;
* notebook 03 in JupyterLab: Run > Run All Cells, find the explorer's controls, move the
  host-step slider with the keyboard and click the order toggle; the picture must change;
* notebook 06 in JupyterLab: type a wrong, then a right answer into exercise 1 and run its
  self-check; the coaching (and no traceback), then the confirmation, must show;
* notebook 07 (the gallery) in JupyterLab: Run All, click the what-if widget's other replay order
  and tick the fix; its text and picture must follow.

Screenshots (and the JupyterLab log) are written to ``out/browser/``, among them every
picture of the HTML edition as a page shows it (``html-<notebook>-picture-<n>.png``).

Without Chromium (``/usr/bin/chromium``, or the path in ``$CHROMIUM``) or the ``playwright``
package the tests skip, saying how to install them; with ``CI=true`` (which ``.ci/run``
sets) they fail instead: CI must never pass without looking.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ARTEFACTS = ROOT / "out" / "browser"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# As root Chromium needs --no-sandbox; the others keep it from calling home (the CI network
# is closed, and every attempt would be a slow failure).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
INSTALL_CHROMIUM = "apt-get update && apt-get install -y chromium"
TIMEOUT_MS = 60_000
# What ipywidgets shows when the front end cannot display a model (version mismatch,
# missing extension): none of it may appear on a page.
WIDGET_FAILURES = ("Error displaying widget", "Failed to load model class",
                   "Could not create a view", "model not found")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason}. CI=true: the browser tests must run in CI, not skip. "
                    "(.ci/run installs Chromium with apt.)", pytrace=False)
    pytest.skip(reason)


# ----------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        _unavailable(f"browser tests need Chromium at {CHROMIUM} (set $CHROMIUM to use another); "
                     f"install it with: {INSTALL_CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("browser tests need the playwright package: "
                     f"{sys.executable} -m pip install -e '.[test]'")
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                              args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Page:
    """A Playwright page plus what it logged: console errors, page errors, blocked requests."""

    page: object
    errors: list[str]
    external: list[str]

    def problems(self) -> list[str]:
        return self.errors + [f"request left the machine: {url}" for url in self.external]


@pytest.fixture
def page(browser, request):
    """A fresh browser context; requests to anything but loopback are blocked and recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    external: list[str] = []

    def route(r):
        host = r.request.url.split("/")[2].split(":")[0] if "://" in r.request.url else ""
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    p = context.new_page()
    p.on("console", lambda m: errors.append(f"console.{m.type}: {m.text} ({m.location.get('url')})")
         if m.type == "error" else None)
    p.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    p.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    try:
        yield Page(p, errors, external)
    finally:
        name = request.node.name
        (ARTEFACTS / f"{name}-console.txt").write_text(
            "".join(f"{line}\n" for line in Page(p, errors, external).problems()))
        try:
            p.screenshot(path=str(ARTEFACTS / f"{name}-end.png"), full_page=False)
        except Exception:  # a dead page: nothing more to show
            pass
        context.close()


# ----------------------------------------------------------------- the static HTML edition
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def html_edition(browser, tmp_path_factory):
    """``scripts/build_html.py`` into a temporary folder, served on a free loopback port."""
    if shutil.which("npm") is None and not (ROOT / "out" / "cache" / "npm").is_dir():
        _unavailable("the HTML edition needs npm once, to fetch the widget JavaScript: "
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
    order = p.locator(".widget-toggle-buttons").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^issue order$")))
    slider = p.locator(".widget-slider").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^host step$")))
    expect(order).to_have_count(1)
    expect(slider).to_have_count(1)
    expect(order.locator("button.mod-active")).to_have_count(1)
    image = p.locator(".widget-subarea img.widget-image").first
    p.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    box = p.locator(".widget-subarea").filter(has=order).first
    box.scroll_into_view_if_needed()
    shot(p, "html-03-explorer.png", box)
    p.goto(f"{url}/07-gallery.html", wait_until="load")
    what_if = p.locator(".widget-toggle-buttons").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^replay order$")))
    expect(what_if).to_have_count(1)
    expect(what_if.locator("button.mod-active")).to_have_text("read both after both replays")
    box = p.locator(".widget-subarea").filter(has=what_if).first
    expect(box.locator(".widget-html")).to_contain_text("silently wrong")
    box.scroll_into_view_if_needed()
    shot(p, "html-07-what-if.png", box)
    p.goto(f"{url}/index.html")
    shot(p, "html-index.png")
    assert not page.problems(), page.problems()


# ----------------------------------------------------------------- JupyterLab
@dataclass
class Lab:
    url: str
    token: str

    def open(self, page, notebook: str) -> None:
        page.goto(f"{self.url}/lab/tree/{notebook}?reset&token={self.token}")
        page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
        kernel_idle(page)


def _die_with_parent() -> None:
    """In the child: get SIGTERM if pytest dies without running its finalizers (Linux).

    The kernels need nothing of the kind: ipykernel exits when its parent, the server, goes.
    """
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, start time) of every process under ``pid``: the kernels run in their own sessions."""
    children: dict[int, list[int]] = {}
    start: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            start[int(entry.name)] = fields[19]
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append((child, start[child]))
        todo.extend(children.get(child, []))
    return found


def _still_ours(pid: int, started: str) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started)
    except OSError:
        return False


def _stop_lab(proc: subprocess.Popen, url: str, token: str) -> None:
    """Shut JupyterLab down (kernels first), then kill whatever of it is left."""
    if proc.poll() is None:
        kernels = _descendants(proc.pid)
        try:
            urllib.request.urlopen(urllib.request.Request(
                f"{url}/api/shutdown", method="POST",
                headers={"Authorization": f"token {token}"}), timeout=10)
        except (OSError, urllib.error.URLError):
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        for pid, started in kernels:
            if _still_ours(pid, started):
                os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=10)


def start_lab(home: Path) -> tuple[subprocess.Popen, Lab, Path]:
    """Start JupyterLab on a free loopback port, on a copy of notebooks/ under ``home``.

    Its configuration, data, settings and workspaces live under ``home`` too, so that
    nothing of the user's (or an earlier run's) applies. Returns (process, Lab, log file);
    the caller stops it with ``_stop_lab`` even if this function fails.
    """
    root = home / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = home / "lab-settings"
    # Every cell stays in the DOM (JupyterLab otherwise renders only the visible ones), and
    # the notebook's kernel starts without the "Select Kernel" dialog.
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True}))
    # No "get notified about official Jupyter news?" toast over the notebook.
    page_config = home / "config" / "labconfig" / "page_config.json"
    page_config.parent.mkdir(parents=True)
    page_config.write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               PYTHONUNBUFFERED="1")
    port, token = _free_port(), secrets.token_hex(24)
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
           "--ServerApp.open_browser=False", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = home / "jupyterlab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)
    return proc, Lab(url, token), log_path


def wait_for_lab(proc: subprocess.Popen, lab: Lab, log_path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(urllib.request.Request(
                    f"{lab.url}/api/status", headers={"Authorization": f"token {lab.token}"}),
                    timeout=5):
                return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer in {timeout:.0f} s:\n"
                            f"{log_path.read_text()[-3000:]}")
            time.sleep(0.3)


@pytest.fixture(scope="module")
def lab(browser, tmp_path_factory, request):
    """JupyterLab on a free loopback port, on a temporary copy of notebooks/, own config."""
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        _unavailable("browser tests need JupyterLab: pip install -e '.[all]'")
    proc, lab, log_path = start_lab(tmp_path_factory.mktemp("jupyterlab"))

    def stop() -> None:
        try:
            _stop_lab(proc, lab.url, lab.token)
        finally:
            shutil.copyfile(log_path, ARTEFACTS / "jupyterlab.log")

    request.addfinalizer(stop)
    wait_for_lab(proc, lab, log_path)
    return lab


def kernel_idle(page) -> None:
    """Wait until the notebook has a kernel and it is idle, as the status bar says it.

    (The toolbar's execution indicator reads "idle" before any kernel is connected.)
    """
    page.wait_for_function(
        """() => {
            const name = document.querySelector('.jp-NotebookPanel-toolbar .jp-KernelName');
            return name && !/No Kernel/.test(name.textContent) &&
                [...document.querySelectorAll('.jp-StatusBar-Item')].some(
                    e => /^(?!No Kernel).+ \\| Idle$/.test(e.textContent.trim()));
        }""", timeout=2 * TIMEOUT_MS)


def run_all(page) -> None:
    """Run ▸ Run All Cells, as a learner would, and wait until every code cell has run."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Run All Cells")).click()
    page.wait_for_function(
        """() => {
            if (document.querySelector('.jp-Dialog')) return true;
            const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""", timeout=3 * TIMEOUT_MS)
    dialog = page.locator(".jp-Dialog")
    assert not dialog.count(), f"JupyterLab asked: {dialog.inner_text()}"
    kernel_idle(page)


def code_cell(page, source_start: str):
    """The code cell whose source begins with ``source_start``."""
    cells = page.locator(".jp-NotebookPanel .jp-CodeCell").filter(
        has=page.locator(".cm-content", has_text=source_start))
    return cells.first


def assert_no_widget_failures(page, where) -> None:
    text = where.inner_text()
    for failure in WIDGET_FAILURES:
        assert failure not in text, f"{failure!r} on the page"


def image_digest(image) -> str:
    """SHA-256 of the bytes the <img> shows (the widget's PNG, through its blob: URL)."""
    data = image.evaluate("""async img => {
        const buf = await (await fetch(img.src)).arrayBuffer();
        return Array.from(new Uint8Array(buf));
    }""")
    return hashlib.sha256(bytes(data)).hexdigest()


def shot(page, name: str, locator=None) -> None:
    (locator or page).screenshot(path=str(ARTEFACTS / name))


# ----------------------------------------------------------------- notebook 03
def test_dispose_bug_explorer_renders_and_redraws_in_jupyterlab(lab, page):
    from playwright.sync_api import expect

    p = page.page
    lab.open(p, "03-the-dispose-bug.ipynb")
    run_all(p)

    # The explorer's VBox: the "issue order" toggle buttons, the "host step" slider, the picture.
    order = p.locator(".widget-toggle-buttons").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^issue order$")))
    slider = p.locator(".widget-slider").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^host step$")))
    box = p.locator(".widget-vbox").filter(has=order).filter(has=slider).first
    expect(order).to_have_count(1)
    expect(slider).to_have_count(1)
    image = box.locator("img.widget-image")
    expect(image).to_have_count(1)
    p.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
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
def _check_message(answer: object) -> tuple[bool, str]:
    """(right?, first line of what ``lab.check(1, answer)`` says), from notebook 06's workbook itself."""
    import contextlib
    import io

    from notebook_lab import LAB

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            LAB.check(1, answer)
    except AssertionError as wrong:
        return False, str(wrong).splitlines()[0]
    return True, out.getvalue().splitlines()[0]


def _answer(p, text: str) -> None:
    """Replace exercise 1's answer cell with ``text`` and run it and its check (Shift+Enter x2)."""
    cell = code_cell(p, "answer_1 =")
    cell.locator(".cm-content").click()
    p.keyboard.press("Control+A")
    p.keyboard.insert_text(text)
    p.keyboard.press("Shift+Enter")     # runs the answer cell, selects the check cell
    p.keyboard.press("Shift+Enter")     # runs the check cell


def test_lab_self_check_explains_a_wrong_answer_and_confirms_a_right_one(lab, page):
    from notebook_lab import LAB
    from playwright.sync_api import expect

    right = LAB.expected(1)
    wrong = {**right, "shared_first": "correct"}     # the answer the tutorial used to teach
    wrong_ok, wrong_text = _check_message(wrong)
    right_ok, right_text = _check_message(right)
    assert not wrong_ok and right_ok

    p = page.page
    lab.open(p, "06-lab.ipynb")
    run_all(p)
    check = code_cell(p, "lab.check(1, answer_1)")
    output = check.locator(".jp-OutputArea")
    expect(output).to_contain_text("not answered yet")

    _answer(p, f"answer_1 = {wrong!r}")
    expect(output).to_contain_text(wrong_text)
    expect(output).to_contain_text("Read: notebook")
    for traceback in ("Traceback", "lab.py", "AssertionError"):   # coaching, not a stack
        expect(output).not_to_contain_text(traceback)
    check.scroll_into_view_if_needed()
    shot(p, "lab-06-wrong-answer.png")

    _answer(p, f"answer_1 = {right!r}")
    expect(output).to_contain_text(right_text)
    expect(output).not_to_contain_text("not yet")
    kernel_idle(p)
    check.scroll_into_view_if_needed()
    shot(p, "lab-06-right-answer.png")
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())


# ----------------------------------------------------------------- notebook 07
def test_gallery_what_if_widget_follows_the_replay_order_and_the_fix_in_jupyterlab(lab, page):
    from playwright.sync_api import expect

    p = page.page
    lab.open(p, "07-gallery.ipynb")
    run_all(p)
    order = p.locator(".widget-toggle-buttons").filter(
        has=p.locator(".widget-label", has_text=re.compile(r"^replay order$")))
    expect(order).to_have_count(1)
    box = p.locator(".widget-vbox").filter(has=order).first
    image, status = box.locator("img.widget-image"), box.locator(".widget-html")
    expect(image).to_have_count(1)
    p.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    expect(status).to_contain_text("silently wrong; the checker reports graphs_clobber")
    assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    box.scroll_into_view_if_needed()
    shot(p, "lab-07-what-if-before.png", box)

    before = image_digest(image)
    order.locator("button", has_text="read each right after its replay").click()
    expect(order.locator("button.mod-active")).to_have_text("read each right after its replay")
    expect(status).to_contain_text("read each output before the next replay, reading the weak outputs: correct")
    expect(status).not_to_contain_text("!= eager")
    deadline = time.monotonic() + 30
    while image_digest(image) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert image_digest(image) != before, "the replay order changed but the picture did not"

    order.locator("button", has_text="read both after both replays").click()
    box.locator("input[type=checkbox]").check()
    expect(status).to_contain_text("copying each output out at once: correct; the checker reports nothing")
    assert_no_widget_failures(p, p.locator(".jp-NotebookPanel"))
    shot(p, "lab-07-what-if-fixed.png", box)
    assert not page.problems(), "JupyterLab logged:\n" + "\n".join(page.problems())
