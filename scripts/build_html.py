#!/usr/bin/env python3
"""Build the static HTML edition of the tutorial: ``make html`` writes ``out/html/index.html``.

Every notebook in ``notebooks/`` is executed in a temporary copy of that folder (the
committed notebooks are never touched) by nbconvert's ``ExecutePreprocessor`` with
``store_widget_state=True``, so that the ipywidgets state lands in the notebook's
metadata, then exported with nbconvert's ``lab`` HTML template. With that state a page
shows the explorers' controls and pictures without a kernel (moving a control there
re-simulates nothing: that needs ``make tutorial``).

The edition is self-contained, so that it opens offline without console errors:
nbconvert's template loads require.js and the widget manager
(``@jupyter-widgets/html-manager``'s ``dist/embed-amd.js``) from CDNs by default. This
script fetches pinned versions from the npm registry with ``npm pack`` (cached under
``out/cache/npm/``, so later builds need no network), copies them next to the pages (and
the Font Awesome fonts the widget CSS refers to into ``@jupyter-widgets/``), and points
nbconvert at them (``HTMLExporter.require_js_url``, ``HTMLExporter.widget_renderer_url``).
MathJax, also a CDN script, is left out of pages without LaTeX math (today: every page);
a page with math would load it from its CDN, and the browser test would say so.
The pages also open from ``file://``.

The contents page lists the notebooks in reading order (a lab before its solutions). A page
that would show one picture twice (a static copy of a widget's view next to the widget,
say) fails the build: ``repeated_pictures`` compares every PNG the page shows, widget
state included.

    python scripts/build_html.py [--out out/html] [--notebooks notebooks] [--jobs 2]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# html-manager 1.0.15 is the release that goes with ipywidgets 8.1.x (controls ^5.0.13,
# the same range as the installed jupyterlab_widgets front end).
HTML_MANAGER = "@jupyter-widgets/html-manager@1.0.15"
REQUIREJS = "requirejs@2.3.8"
WIDGET_JS, REQUIRE_JS = "embed-amd.js", "require.js"
# Font Awesome, which the widget CSS uses; browsers take the first format of an @font-face
# they support, and every current one supports woff2 (woff is the fallback).
FONT_SUFFIXES = (".woff2", ".woff")
MATH = re.compile(r"\$\$|\\\(|\\\[|\\begin\{|(?<![\\$])\$[^$\s][^$\n]*\$")

# A small template on top of nbconvert's "lab" one: MathJax only where there is math, the
# widgets in the page's sans-serif font (as in JupyterLab), a link back to the contents page.
TEMPLATE_CONF = {"base_template": "lab", "mimetypes": {"text/html": True}}
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_mathjax -%}
{%- if resources.get('needs_mathjax') -%}{{ super() }}{%- endif -%}
{%- endblock html_head_js_mathjax -%}
{%- block extra_css -%}
{{ super() }}
<style>
.jupyter-widgets { font-family: var(--jp-ui-font-family); }
/* code blocks in the prose look like the code cells (the theme leaves them bare) */
.jp-RenderedHTMLCommon.jp-RenderedMarkdown .highlight,
.jp-RenderedHTMLCommon.jp-RenderedMarkdown > pre {
  background: var(--jp-cell-editor-background, #f7f7f7);
  border: 1px solid var(--jp-cell-editor-border-color, #e0e0e0);
  border-radius: 3px; padding: 8px 12px; margin: 0.5em 0 1em; overflow-x: auto;
}
.jp-RenderedHTMLCommon.jp-RenderedMarkdown .highlight pre {
  background: none; border: 0; padding: 0; margin: 0; line-height: 1.45;
}
</style>
{%- endblock extra_css -%}
{%- block body_header -%}
{{ super() }}
<nav class="edition-nav" style="padding: 8px 16px; font-family: sans-serif; font-size: 13px">
  <a href="index.html">capture-order lab: contents</a>
</nav>
{%- endblock body_header -%}
"""


def log(message: str) -> None:
    print(f"build_html: {message}", flush=True)


# ----------------------------------------------------------------- JavaScript from npm
def npm_pack(spec: str, cache: Path) -> Path:
    """The tarball of ``spec`` from the npm registry (``npm pack``), cached in ``cache``."""
    name = spec.rsplit("@", 1)[0].lstrip("@").replace("/", "-")
    tarball = cache / f"{name}-{spec.rsplit('@', 1)[1]}.tgz"
    if not tarball.is_file():
        npm = shutil.which("npm")
        if npm is None:
            sys.exit("build_html: npm is needed once to fetch the widget JavaScript "
                     "(apt-get install -y npm, or install Node.js)")
        cache.mkdir(parents=True, exist_ok=True)
        log(f"npm pack {spec}")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:  # two builds at once: no torn file
            done = subprocess.run([npm, "pack", "--silent", spec], cwd=tmp,
                                  capture_output=True, text=True)
            packed = Path(tmp) / tarball.name
            if done.returncode != 0 or not packed.is_file():
                sys.exit(f"build_html: `npm pack {spec}` failed ({done.returncode}):\n"
                         f"{done.stderr.strip()}")
            os.replace(packed, tarball)
    return tarball


def install_assets(out: Path, cache: Path) -> None:
    """Copy require.js, embed-amd.js and its font files into ``out``.

    embed-amd.js looks for its fonts next to the AMD module it defines,
    ``@jupyter-widgets/html-manager``, which require.js resolves against the page's
    folder: so the fonts go to ``out/@jupyter-widgets/``.
    """
    fonts = out / "@jupyter-widgets"
    fonts.mkdir()
    with tarfile.open(npm_pack(HTML_MANAGER, cache)) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("package/dist/")
            if not member.isfile() or not member.name.startswith("package/dist/") or "/" in name:
                continue
            if name == WIDGET_JS:
                (out / name).write_bytes(tar.extractfile(member).read())
            elif name.endswith(FONT_SUFFIXES):
                (fonts / name).write_bytes(tar.extractfile(member).read())
    with tarfile.open(npm_pack(REQUIREJS, cache)) as tar:
        (out / REQUIRE_JS).write_bytes(tar.extractfile("package/require.js").read())


# ----------------------------------------------------------------- notebooks
def execute(path: str, timeout: int) -> str:
    """Execute the notebook at ``path`` in its folder, keeping widget state; return it as JSON."""
    import nbformat
    from nbconvert.preprocessors import ExecutePreprocessor

    nb = nbformat.read(path, as_version=4)
    # (The kernel's log level: it warns on start that its local TCP sockets are unencrypted.)
    ExecutePreprocessor(timeout=timeout, store_widget_state=True,
                        extra_arguments=["--IPKernelApp.log_level=ERROR"]).preprocess(
        nb, {"metadata": {"path": str(Path(path).parent)}})
    return nbformat.writes(nb)


def reading_order(path: Path) -> tuple[str, bool]:
    """Sort key: by name, but a notebook before its ``-solutions`` companion."""
    return path.stem.removesuffix("-solutions"), path.stem.endswith("-solutions")


PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
WIDGET_STATE = re.compile(
    r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.DOTALL)


def repeated_pictures(page: str) -> list[str]:
    """Pictures a page shows more than once: "<sha256 prefix> x<count>" each.

    Counts inline PNG outputs and the PNG values of saved widget state (an
    ``Image`` widget's ``value`` buffer), which is what the page draws.
    """
    pictures = PNG.findall(page)
    for state in WIDGET_STATE.findall(page):
        for model in json.loads(state)["state"].values():
            pictures += [b["data"] for b in model.get("buffers", [])
                         if b.get("path") == ["value"] and model.get("model_name") == "ImageModel"]
    counts = collections.Counter(hashlib.sha256(p.encode()).hexdigest()[:12] for p in pictures)
    return [f"{digest} x{n}" for digest, n in counts.items() if n > 1]


def has_math(nb) -> bool:
    return any(c.cell_type == "markdown" and MATH.search(c.source) for c in nb.cells)


def title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def index_page(entries: list[tuple[str, str]]) -> str:
    items = "\n".join(f'    <li><a href="{html.escape(href)}">{html.escape(text)}</a></li>'
                      for href, text in entries)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>capture-order lab: the tutorial</title>
<style>
  body {{ font-family: sans-serif; max-width: 46em; margin: 2em auto; padding: 0 1em;
         line-height: 1.5; color: #222; }}
  code {{ background: #f2f2f2; padding: 0 .25em; }}
  pre {{ background: #f2f2f2; padding: .6em .8em; overflow-x: auto; }}
</style>
</head>
<body>
<h1>capture-order lab: the tutorial</h1>
<p>Under CUDA graph capture, host program order decides what a kernel freezes. These are the
tutorial's notebooks, executed, with their interactive controls saved as they were at the end
of the run. Moving a control here changes nothing: for that, run the notebooks in JupyterLab
(<code>make tutorial</code>).</p>
<ol>
{items}
</ol>
</body>
</html>
"""


def build(out: Path, notebooks: Path, jobs: int, timeout: int, cache: Path) -> list[Path]:
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    sources = sorted(notebooks.glob("*.ipynb"), key=reading_order)
    if not sources:
        sys.exit(f"build_html: no notebooks in {notebooks}")
    staging = Path(tempfile.mkdtemp(prefix=".html-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the edition is for serving
    try:
        install_assets(staging, cache)
        with tempfile.TemporaryDirectory(prefix="capture-order-html-") as tmp:
            work = Path(tmp) / "notebooks"
            shutil.copytree(notebooks, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            template_dir = Path(tmp) / "templates" / "offline"
            template_dir.mkdir(parents=True)
            (template_dir / "conf.json").write_text(json.dumps(TEMPLATE_CONF))
            (template_dir / "index.html.j2").write_text(TEMPLATE)

            config = Config()
            config.HTMLExporter.template_name = "offline"
            config.HTMLExporter.extra_template_basedirs = [str(template_dir.parent)]
            config.HTMLExporter.require_js_url = REQUIRE_JS
            config.HTMLExporter.widget_renderer_url = WIDGET_JS
            exporter = HTMLExporter(config=config)

            t0 = time.perf_counter()
            with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {src.name: pool.submit(execute, str(work / src.name), timeout)
                           for src in sources}
                executed = {}
                for name, future in futures.items():
                    try:
                        executed[name] = nbformat.reads(future.result(), as_version=4)
                    except Exception as error:  # a cell failed: say which notebook
                        pool.shutdown(wait=False, cancel_futures=True)
                        sys.exit(f"build_html: executing {name} failed:\n{error}")
                    log(f"executed {name}")
            log(f"executed {len(sources)} notebooks in {time.perf_counter() - t0:.0f} s")

            entries, pages = [], []
            for src in sources:
                nb = executed[src.name]
                math = has_math(nb)
                if math:
                    log(f"{src.name} has LaTeX math: its page loads MathJax from a CDN")
                body, _ = exporter.from_notebook_node(
                    nb, resources={"metadata": {"name": src.stem}, "needs_mathjax": math})
                repeated = repeated_pictures(body)
                if repeated:
                    sys.exit(f"build_html: {src.name} shows a picture more than once "
                             f"({', '.join(repeated)}): a static copy of a view already shown, "
                             "or the same figure displayed twice")
                page = f"{src.stem}.html"
                (staging / page).write_text(body, encoding="utf-8")
                entries.append((page, title(nb, src.stem)))
                pages.append(out / page)
        (staging / "index.html").write_text(index_page(entries), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "html",
                        help="output folder, replaced by the build (default: out/html)")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="notebooks executed at once (default: 2)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("--cache", type=Path, default=ROOT / "out" / "cache" / "npm",
                        help="where npm tarballs are kept between builds")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pages = build(out, args.notebooks.resolve(), max(1, args.jobs), args.timeout,
                  args.cache.resolve())
    log(f"wrote {len(pages)} pages and index.html to {out} "
        f"in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
