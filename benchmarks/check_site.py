"""Check the built documentation site in a real headless browser (Chromium).

Builds the site as `make docs` does (`python -m mkdocs build --strict -d DIR`, into a temporary
folder unless `--site` names a built one), serves it with `python -m http.server` on
127.0.0.1, loads every page of mkdocs.yml's nav in `chromium --headless --dump-dom` and checks:

- every nav page loads (HTTP 200) in Chromium with its title: the DOM's `<title>` is the
  nav label and the site name (the site name alone for the home page), and its first `<h1>`
  is the page's own title (the first `# ` heading of its Markdown file);
- every API page (`docs/api/*.md`) lists, as an element id in the rendered DOM, each public
  name of `invariant_jax.__all__` that its `:::` directives assign to it: a directive naming
  the object (`::: invariant_jax.graph.mlp`), or a module directive (`::: invariant_jax.graph`)
  of the module that defines it; a public name no API page is assigned is an error;
- every internal link, stylesheet, script and image in every rendered page resolves (a GET
  to the server answers 200), every `#fragment` of an internal link names an id of its target
  page, and the server logged no 404 while Chromium loaded the pages.

    PYTHONPATH=. .venv/bin/python benchmarks/check_site.py [--site DIR] [--chromium PATH] [--out JSON]

Exits 0 when every check passes, 1 otherwise (each failure printed), 2 when Chromium or
mkdocs is missing. Chromium runs with `--no-sandbox` (the sandbox refuses to start as root).
"""

from __future__ import annotations

import argparse
import html.parser
import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from _output import output_path, write_json

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium executable: `explicit`, `$CHROMIUM`, or the first of `BROWSERS` on PATH."""
    for name in (explicit, os.environ.get("CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def have_mkdocs() -> bool:
    try:
        importlib.import_module("mkdocs")
        importlib.import_module("mkdocstrings")
        importlib.import_module("material")
    except ImportError:
        return False
    return True


def nav_pages(config: Path = ROOT / "mkdocs.yml") -> list[tuple[str, str]]:
    """`(nav label, Markdown path relative to docs/)` for every page in mkdocs.yml's nav."""
    import yaml

    nav = yaml.safe_load(config.read_text())["nav"]
    out = []

    def walk(items):
        for item in items:
            if isinstance(item, str):
                out.append((item, item))
                continue
            for label, v in item.items():
                walk(v) if isinstance(v, list) else out.append((label, v))

    walk(nav)
    return out


def page_url(md: str) -> str:
    """The URL path mkdocs gives a page (`use_directory_urls`: `a/b.md` -> `/a/b/`)."""
    stem = md.removesuffix(".md")
    if stem == "index":
        return "/"
    if stem.endswith("/index"):
        return "/" + stem.removesuffix("index")
    return f"/{stem}/"


def page_title(md: str) -> str:
    """The page's own title: its first `# ` heading, Markdown code marks removed."""
    for line in (ROOT / "docs" / md).read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return ""


def api_assignment() -> tuple[dict[str, list[str]], list[str]]:
    """`{api page: [public names]}` from the pages' `:::` directives, and the public names of
    `invariant_jax.__all__` that no page is assigned (see the module docstring)."""
    import invariant_jax as ij

    names = [n for n in ij.__all__ if not n.startswith("__") and n != "channels"]  # channels: a namespace page
    directives = {}
    for p in sorted((ROOT / "docs" / "api").glob("*.md")):
        directives[f"api/{p.name}"] = re.findall(r"^:::\s*(\S+)", p.read_text(), re.M)
    pages: dict[str, list[str]] = {k: [] for k in directives}
    unassigned = []
    for n in names:
        obj = getattr(ij, n)
        hit = None
        for page, targets in directives.items():
            for t in targets:
                if t.rsplit(".", 1)[-1] == n:
                    hit = page
                    break
                try:
                    mod = importlib.import_module(t)
                except ImportError:
                    continue
                if getattr(mod, n, None) is obj and (
                    getattr(obj, "__module__", None) == t or n in getattr(mod, "__all__", ())
                ):
                    hit = page
                    break
            if hit:
                break
        if hit:
            pages[hit].append(n)
        else:
            unassigned.append(n)
    return pages, unassigned


class _Refs(html.parser.HTMLParser):
    """Links, resources, element ids and the `<title>` of one HTML document."""

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()
        self.title = ""
        self.h1 = ""
        self._in_title = False
        self._in_h1 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("name") and tag == "a":
            self.ids.add(a["name"])
        key = {"a": "href", "link": "href", "script": "src", "img": "src", "source": "src"}.get(tag)
        if key and a.get(key):
            self.refs.append(a[key])
        self._in_title = tag == "title"
        if tag == "h1" and not self.h1:
            self._in_h1 = True

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._in_h1:
            self.h1 += data


def parse(text: str) -> _Refs:
    p = _Refs()
    p.feed(text)
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
            ctype = r.headers.get("Content-Type", "")
            return r.status, body.decode("utf-8", "replace") if "html" in ctype else ""
    except urllib.error.HTTPError as e:
        return e.code, ""


def dump_dom(chromium: str, url: str, profile: str, timeout: float = 60) -> str:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=1000",
        "--dump-dom",
        url,
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0 or not run.stdout.strip():
        raise RuntimeError(f"chromium failed on {url} (exit {run.returncode}): {run.stderr[-800:]}")
    return run.stdout


def build_site(dest: Path) -> float:
    t = time.perf_counter()
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(dest),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    if run.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{run.stderr[-4000:]}")
    return time.perf_counter() - t


def check_site(site: Path, chromium: str) -> dict:
    """Serve `site`, load every nav page in Chromium and run the checks. Returns a report:
    `pages` (per page: url, title, links, names checked), `failures` (strings), timings."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w+", prefix="check-site-http-", suffix=".log", delete=False)
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=log,
        stderr=log,
    )
    failures: list[str] = []
    report: dict = {"pages": [], "failures": failures}
    t0 = time.perf_counter()
    try:
        for _ in range(100):  # wait for the server
            try:
                fetch(base + "/")
                break
            except OSError:
                time.sleep(0.1)
        api_pages, unassigned = api_assignment()
        failures += [
            f"public name {n!r} is assigned to no API page (no ::: directive names it or its module)"
            for n in unassigned
        ]
        import yaml

        site_name = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_name"]
        doms: dict[str, _Refs] = {}  # URL path (no fragment) -> parsed rendered DOM
        with tempfile.TemporaryDirectory(prefix="check-site-chromium-") as profile:
            for label, md in nav_pages():
                path = page_url(md)
                http_code, _ = fetch(base + path)
                if http_code != 200:
                    failures.append(f"{md}: {path} answered {http_code}")
                    continue
                dom = dump_dom(chromium, base + path, profile)
                p = parse(dom)
                doms[path] = p
                want = page_title(md)
                title, h1 = p.title.strip(), " ".join(p.h1.split()).removesuffix("¶").strip()
                entry = {"page": md, "nav": label, "url": path, "title": title, "h1": h1, "dom_chars": len(dom)}
                head = site_name if path == "/" else f"{label} - {site_name}"
                if title != head:
                    failures.append(f"{md}: <title> {title!r}, expected {head!r} (nav label - site name)")
                if not want or h1 != want:
                    failures.append(f"{md}: first heading {h1!r} in the DOM, expected the page's title {want!r}")
                if md in api_pages:
                    names = api_pages[md]
                    missing = [n for n in names if not any(i == n or i.endswith("." + n) for i in p.ids)]
                    entry["public_names"] = len(names)
                    failures += [f"{md}: public name {n!r} has no entry (no element id ending in it)" for n in missing]
                report["pages"].append(entry)
        # every internal reference of every rendered page
        checked: dict[str, int] = {}
        n_refs = 0
        for path, p in doms.items():
            for ref in p.refs:
                url = urllib.parse.urljoin(base + path, ref)
                parts = urllib.parse.urlsplit(url)
                if parts.scheme not in ("http", "https") or parts.netloc != f"127.0.0.1:{port}":
                    continue
                n_refs += 1
                target = parts.path
                if target not in checked:
                    checked[target], body = fetch(base + target)
                    if target not in doms and body:
                        _static[target] = parse(body)
                if checked[target] != 200:
                    failures.append(f"{path}: link {ref!r} -> {target} answered {checked[target]}")
                    continue
                frag = urllib.parse.unquote(parts.fragment)
                if frag:
                    ids = (doms.get(target) or _static.get(target) or _Refs()).ids
                    if frag not in ids:
                        failures.append(f"{path}: link {ref!r}: no id {frag!r} in {target}")
        report["internal_refs"] = n_refs
        report["distinct_targets"] = len(checked)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.seek(0)
        lines = log.read().splitlines()
        log.close()
        os.unlink(log.name)
    not_found = sorted({m.group(1) for line in lines if (m := re.search(r'"GET (\S+) HTTP/[\d.]+" 404', line))})
    failures += [f"server answered 404 for {u}" for u in not_found]
    report["requests"] = sum(1 for line in lines if '"GET ' in line)
    report["check_seconds"] = time.perf_counter() - t0
    report["failures"] = list(dict.fromkeys(failures))  # one line per distinct failure
    _static.clear()
    return report


_static: dict[str, _Refs] = {}  # parsed static HTML of link targets that are not nav pages


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", help="a built site to check (default: build one into a temporary folder)")
    ap.add_argument("--chromium", help="the Chromium executable (default: $CHROMIUM or chromium on PATH)")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("chromium not found (apt-get install chromium, or pass --chromium)", file=sys.stderr)
        return 2
    if not args.site and not have_mkdocs():
        print(
            "mkdocs, mkdocstrings or mkdocs-material not installed (pip install -e '.[docs]' -c constraints.txt)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="check-site-") as tmp:
        site = Path(args.site) if args.site else Path(tmp) / "site"
        build_s = None if args.site else build_site(site)
        report = check_site(site, chromium)
    report["build_seconds"] = build_s
    report["chromium"] = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
    for e in report["pages"]:
        extra = f", {e['public_names']} public names" if "public_names" in e else ""
        print(f"loaded {e['url']:<20} {e['title']!r}, h1 {e['h1']!r}{extra}")
    print(
        f"{len(report['pages'])} pages, {report['internal_refs']} internal references to "
        f"{report['distinct_targets']} targets, {report['requests']} requests served; build "
        f"{'-' if build_s is None else f'{build_s:.1f} s'}, check {report['check_seconds']:.1f} s ({report['chromium']})"
    )
    for f in report["failures"]:
        print("FAIL", f)
    if args.out:
        write_json(output_path(args.out, "check_site.json"), report)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
