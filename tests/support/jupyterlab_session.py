"""Chromium and JupyterLab for the browser tests: the fixtures and the moves a learner makes.

The browser tests (``tests/test_browser*.py``) start JupyterLab headless on a free loopback port,
on a temporary copy of ``notebooks/`` (the committed notebooks are never modified), and drive
Debian's Chromium through Playwright. ``browser``, ``page`` and ``lab`` are their fixtures (a test
module imports them); ``run_all``, ``code_cell``, ``answer_and_check``, ``check_message``,
``image_digest`` and ``shot`` are what the tests do on a page. Screenshots (and the JupyterLab log)
are written to ``out/browser/``.

Without Chromium (``/usr/bin/chromium``, or the path in ``$CHROMIUM``) or the ``playwright``
package the tests skip, saying how to install them; with ``CI=true`` (which ``.ci/run``
sets) they fail instead: CI must never pass without looking.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason}. CI=true: the browser tests must run in CI, not skip. "
                    "(.ci/run installs Chromium with apt.)", pytrace=False)
    pytest.skip(reason)


# ----------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        unavailable(f"browser tests need Chromium at {CHROMIUM} (set $CHROMIUM to use another); "
                     f"install it with: {INSTALL_CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("browser tests need the playwright package: "
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
        unavailable("browser tests need JupyterLab: pip install -e '.[all]'")
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


def answer_and_check(p, text: str, number: int = 1) -> None:
    """Replace exercise ``number``'s answer cell with ``text`` and run it and its check (Shift+Enter x2)."""
    cell = code_cell(p, f"answer_{number} =")
    cell.locator(".cm-content").click()
    p.keyboard.press("Control+A")
    p.keyboard.insert_text(text)
    p.keyboard.press("Shift+Enter")     # runs the answer cell, selects the check cell
    p.keyboard.press("Shift+Enter")     # runs the check cell


def check_message(workbook: Any, number: int, answer: object) -> tuple[bool, str]:
    """(right?, first line of what ``workbook.check(number, answer)`` says), from the workbook itself."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            workbook.check(number, answer)
    except AssertionError as wrong:
        return False, str(wrong).splitlines()[0]
    return True, out.getvalue().splitlines()[0]


def labelled(page, kind: str, label: str):
    """The ipywidget of ``kind`` (``toggle-buttons``, ``slider``, ...) whose description is ``label``."""
    return page.locator(f".widget-{kind}").filter(
        has=page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}$")))


def shown_image(page, box):
    """The one picture in widget ``box``, once the browser has decoded it."""
    from playwright.sync_api import expect

    image = box.locator("img.widget-image")
    expect(image).to_have_count(1)
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    return image
