"""Build the site and check it in a real browser: ``python .ci/check_site.py``.

1. ``mkdocs build --strict`` into ``site/`` (any warning fails the build);
2. serve ``site/`` on 127.0.0.1 (``http.server`` in a thread, a free port);
3. load every page in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven
   by Selenium; nothing is downloaded) and fail on any console error (a JavaScript exception,
   a resource that does not load);
4. check every same-site ``<a href>`` of every page: the target page exists, and its
   ``#fragment`` is an element id of that page;
5. type queries into Material's search box and fail unless the results include the index
   chapter of the specification;
6. check the downloadable suite: every ``awq2-conformance-*`` file of the built site's
   ``assets/`` is byte for byte the committed one of ``docs/assets/`` and none is missing or
   extra, the archive served over HTTP is those bytes, and its ``.sha256`` line matches them;
7. check every picture of every page: it loaded (an ``<img>`` whose file is missing or is not
   a picture the browser can draw fails) and it fits the text column at 1280 px (wider is
   clipped or scrolls);
8. check that every page's ``<h1>`` begins with the page's title in the navigation (the home
   page, whose title is the site's name, excepted), so that a reader who picks an entry sees
   the page it names;
9. check the layout at 1280 px (issue 39): no code block scrolls sideways but printed output
   (``text``), so a comment at the end of a command is never hidden behind a scrollbar; no
   blank band under a page's title (its box ends within a few pixels of its text); the home
   page's buttons stand in one row, none touching the next;
10. save screenshots of the pages of :data:`SCREENSHOTS` to ``site-check/`` (light and dark
   palettes, switched with the palette toggle): the top of each page, and each picture of its
   text scrolled into view, and print their paths.

Exit status 0 when everything passes, 1 otherwise, 2 when the browser or the driver is missing.
Needs the ``docs`` extra (``pip install -e ".[docs]"``) and ``apt-get install chromium
chromium-driver``; ``CHROMIUM`` and ``CHROMEDRIVER`` override the binaries' paths.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
ASSETS = ROOT / "docs" / "assets"
SUITE_GLOB = "awq2-conformance-*"
SHOTS = ROOT / "site-check"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
#: Queries typed into the search box; each must list a section of the index chapter.
#: (Material adds ``?h=QUERY`` to result links for highlighting; it is dropped before comparing.)
SEARCHES = {
    "bucket": ("spec/format/#bucket-table", "spec/format/#index", "spec/format/#lookup"),
    "fan-out": ("spec/rationale/#fan-out-a-table-sized-to-the-tensor-count",),
}
#: The pages screenshotted, by the name their screenshots take: the overview, and the pages
#: last changed (each picture gets a screenshot of its own, too).
SCREENSHOTS = {
    "overview": "",
    "specification": "spec/format/",
    "sets": "spec/sets/",
    "codec": "spec/codec/",
    "security": "spec/security/",
    "benchmarks": "benchmarks/",
    "versions": "versions/",
    "cli": "reference/cli/",
    "serving": "serving-vllm/",
    "migrating": "migrating/",
}
PAGE_TIMEOUT_S = 30
#: Screenshots show the page's top this many pixels tall (the overview's byte map included).
SHOT_MAX_HEIGHT = 2400


# ------------------------------------------------------------------------------ build and serve


def build(site: Path) -> float:
    started = time.perf_counter()
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    if proc.returncode != 0 or warnings:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("FAIL mkdocs build --strict")
    return time.perf_counter() - started


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextmanager
def serve(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def pages(site: Path) -> list[str]:
    """Site-relative URLs of every page (``""`` for the home page, ``"spec/format/"`` ...)."""
    urls = []
    for html in sorted(site.rglob("*.html")):
        rel = html.relative_to(site).as_posix()
        if rel == "404.html":
            continue
        urls.append(rel[: -len("index.html")] if rel.endswith("index.html") else rel)
    return urls


# ------------------------------------------------------------------------------ browser


@contextmanager
def browser(profile: Path) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


def _settle(driver: object) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, PAGE_TIMEOUT_S).until(  # type: ignore[arg-type]
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


_PAGE_FACTS = """
return {
  hrefs: Array.from(document.querySelectorAll('a[href]'), a => a.href),
  ids: Array.from(document.querySelectorAll('[id]'), e => e.id)
       .concat(Array.from(document.querySelectorAll('a[name]'), a => a.name)),
  title: document.title,
  h1: (document.querySelector('article h1') || {}).textContent || '',
  nav: (document.querySelector('.md-nav--primary .md-nav__link--active') || {}).textContent || '',
  // code blocks that scroll sideways (printed output, language-text, may)
  scrolling: Array.from(document.querySelectorAll(
      'article .highlight:not(.language-text) pre > code'))
    .filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.textContent.split('\\n').find(l => l.length) || ''),
  // blank height inside the title's box below its text (the permalink sign excepted)
  titleBand: (() => {
    const h1 = document.querySelector('article h1');
    if (!h1 || !h1.firstChild) return 0;
    const range = document.createRange();
    range.setStartBefore(h1.firstChild);
    const link = h1.querySelector(':scope > .headerlink');
    if (link) range.setEndBefore(link); else range.setEndAfter(h1.lastChild);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
    if (!rects.length) return 0;
    const style = getComputedStyle(h1);
    return h1.getBoundingClientRect().bottom - parseFloat(style.paddingBottom)
           - Math.max(...rects.map(r => r.bottom));
  })(),
  buttons: Array.from(document.querySelectorAll('article .md-button'), b => {
    const r = b.getBoundingClientRect();
    return {text: b.textContent.trim(), left: r.left, right: r.right, top: r.top};
  }),
  // every picture of the text: whether it loaded, and how far it reaches past the column
  images: Array.from(document.querySelectorAll('article img'), img => ({
    src: img.getAttribute('src'),
    loaded: img.complete && img.naturalWidth > 0,
    overflow: img.getBoundingClientRect().right
              - img.closest('article').getBoundingClientRect().right
  }))
};
"""


def console_errors(driver: object) -> list[str]:
    return [
        f"{entry['level']}: {entry['message']}"
        for entry in driver.get_log("browser")  # type: ignore[attr-defined]
        if entry["level"] == "SEVERE"
    ]


def visit_all(driver: object, base: str, urls: list[str]) -> tuple[dict[str, dict], list[str]]:
    facts: dict[str, dict] = {}
    problems: list[str] = []
    for url in urls:
        driver.get(base + url)  # type: ignore[attr-defined]
        _settle(driver)
        time.sleep(0.2)  # let deferred scripts run and report
        facts[url] = driver.execute_script(_PAGE_FACTS)  # type: ignore[attr-defined]
        problems += [f"/{url}: console {msg}" for msg in console_errors(driver)]
        if not facts[url]["h1"].strip() and url.endswith("/"):
            problems.append(f"/{url}: no <h1> in the article")
        problems += picture_problems(url, facts[url]) + title_problems(url, facts[url])
        problems += layout_problems(url, facts[url])
    return facts, problems


def picture_problems(url: str, fact: dict) -> list[str]:
    """Every picture of the page loaded and fits the text column (the window is 1280 px)."""
    problems = []
    for image in fact["images"]:
        if not image["loaded"]:
            problems.append(f"/{url}: picture {image['src']} did not load")
        elif image["overflow"] > 1:
            problems.append(
                f"/{url}: picture {image['src']} reaches {image['overflow']:.0f} px past the "
                "text column at 1280 px"
            )
    return problems


#: A title's box may end this many pixels below its text (descenders); more is a blank band.
TITLE_BAND_PX = 6
#: The least gap between two buttons of the home page, in pixels.
BUTTON_GAP_PX = 4


def layout_problems(url: str, fact: dict) -> list[str]:
    """At 1280 px: no code block but printed output scrolls sideways, no blank band under the
    title, and the home page's buttons in one row with a gap between each two."""
    problems = [
        f"/{url}: a code block scrolls sideways at 1280 px (its end is hidden): {line[:60]!r}"
        for line in fact["scrolling"]
    ]
    if fact["titleBand"] > TITLE_BAND_PX:
        problems.append(f"/{url}: a blank band of {fact['titleBand']:.0f} px under the title")
    if url != "":
        return problems
    buttons = fact["buttons"]
    rows = len({round(b["top"]) for b in buttons})
    if rows > 1:
        problems.append(f"/: the buttons wrap onto {rows} rows at 1280 px")
    for a, b in itertools.pairwise(buttons):
        gap = b["left"] - a["right"]
        if round(a["top"]) == round(b["top"]) and gap < BUTTON_GAP_PX:
            problems.append(
                f"/: buttons {a['text']!r} and {b['text']!r} touch ({gap:.0f} px apart)"
            )
    return problems


def _words(text: str) -> str:
    """Text as the reader sees it: the permalink sign dropped, spaces collapsed."""
    return " ".join(text.replace("\u00b6", " ").split())


def title_problems(url: str, fact: dict) -> list[str]:
    """The page's <h1> begins with its title in the navigation (the home page excepted)."""
    nav, h1 = _words(fact["nav"]), _words(fact["h1"])
    if url == "" or not nav or h1.startswith(nav):
        return []
    return [f"/{url}: the <h1> {h1!r} does not begin with the navigation's title {nav!r}"]


def check_links(base: str, site: Path, facts: dict[str, dict]) -> tuple[int, list[str]]:
    """Every same-site link of every page: (links checked, one line per broken target)."""
    checked, broken = 0, []
    for page, fact in facts.items():
        for href in fact["hrefs"]:
            if not href.startswith(base):
                continue  # another site: not checked (the build is offline)
            target, fragment = urldefrag(href[len(base) :])
            target = unquote(urlsplit(target).path)
            checked += 1
            if target in facts or (target == "" and "" in facts):
                if fragment and unquote(fragment) not in facts[target]["ids"]:
                    broken.append(f"/{page}: #{fragment} is not an id of /{target}")
                continue
            path = site / target
            if target.endswith("/") or not target:
                path = path / "index.html"
            if not path.is_file():
                broken.append(f"/{page}: link to /{target} (no such page or file)")
    return checked, _grouped(broken)


def _grouped(problems: list[str]) -> list[str]:
    """One line per problem text after the page, with the pages that have it."""
    by_problem: dict[str, list[str]] = {}
    for line in problems:
        page, _, what = line.partition(": ")
        by_problem.setdefault(what, []).append(page)
    return [
        f"{what} (on {pages[0]}" + (f" and {len(pages) - 1} more pages)" if len(pages) > 1 else ")")
        for what, pages in by_problem.items()
    ]


def _drop_query(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"#{parts.fragment}" if parts.fragment else "")


def _settled_hrefs(driver: object) -> list[str]:
    """The search result links, once two snapshots 0.3 s apart agree (or after 10 tries)."""
    script = (
        "return Array.from(document.querySelectorAll('.md-search-result a[href]')).map(a => a.href)"
    )
    previous: list[str] | None = None
    for _ in range(10):
        links = list(driver.execute_script(script))  # type: ignore[attr-defined]
        if links == previous:
            break
        previous = links
        time.sleep(0.3)
    return previous or []


def check_search(driver: object, base: str) -> tuple[list[str], list[str]]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    report, problems = [], []
    for query, wanted in SEARCHES.items():
        driver.get(base)  # type: ignore[attr-defined]
        _settle(driver)
        boxes = driver.find_elements(By.CSS_SELECTOR, "input.md-search__input")  # type: ignore[attr-defined]
        if not boxes:
            problems.append(f"search {query!r}: no Material search box on the home page")
            continue
        box = boxes[0]
        driver.execute_script("arguments[0].focus()", box)  # type: ignore[attr-defined]
        box.send_keys(query)
        wait = WebDriverWait(driver, PAGE_TIMEOUT_S)  # type: ignore[arg-type]
        try:
            wait.until(
                lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a[href]")
            )
        except Exception:
            problems.append(f"search {query!r}: no results")
            continue
        # One snapshot from JavaScript: the results re-render while the search settles, and
        # element handles taken one by one can go stale in between.
        links = _settled_hrefs(driver)
        rel = [_drop_query(link[len(base) :]) for link in links if link and link.startswith(base)]
        hits = [r for r in rel if r.startswith(wanted)]
        report.append(f"search {query!r}: {len(rel)} result links; index chapter: {hits[:3]}")
        if not hits:
            problems.append(f"search {query!r}: no result in {wanted}; got {rel[:8]}")
        problems += [f"search {query!r}: console {msg}" for msg in console_errors(driver)]
    return report, problems


def _set_palette(driver: object, scheme: str) -> None:
    from selenium.webdriver.common.by import By

    current = driver.execute_script(  # type: ignore[attr-defined]
        "return document.body.getAttribute('data-md-color-scheme')"
    )
    if (scheme == "dark") != (current == "slate"):
        # the palette toggle: the label of the palette form that is visible
        toggles = driver.find_elements(  # type: ignore[attr-defined]
            By.CSS_SELECTOR, "form[data-md-component=palette] label"
        )
        next(t for t in toggles if t.is_displayed()).click()
        time.sleep(0.3)


#: Scrolls picture ``arguments[0]`` of the text to the top of the window, below the header.
_SHOW_PICTURE = """
const img = document.querySelectorAll('article img')[arguments[0]];
const header = document.querySelector('.md-header');
window.scrollTo(0, img.getBoundingClientRect().top + window.scrollY
                   - (header ? header.offsetHeight : 0) - 16);
"""


def picture_shots(driver: object, name: str, scheme: str, out: Path) -> list[Path]:
    """One window-sized screenshot (1280 x 900) of each picture of the text, in order."""
    count = driver.execute_script(  # type: ignore[attr-defined]
        "return document.querySelectorAll('article img').length"
    )
    saved = []
    for i in range(int(count)):
        driver.execute_script(_SHOW_PICTURE, i)  # type: ignore[attr-defined]
        time.sleep(0.2)
        path = out / f"{name}-picture{i + 1}-{scheme}.png"
        driver.save_screenshot(str(path))  # type: ignore[attr-defined]
        saved.append(path)
    return saved


def screenshots(driver: object, base: str, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    saved = []
    for scheme in ("light", "dark"):
        for name, url in SCREENSHOTS.items():
            driver.get(base + url)  # type: ignore[attr-defined]
            _settle(driver)
            _set_palette(driver, scheme)
            height = driver.execute_script(  # type: ignore[attr-defined]
                "return document.documentElement.scrollHeight"
            )
            driver.set_window_size(1280, min(int(height), SHOT_MAX_HEIGHT))  # type: ignore[attr-defined]
            path = out / f"{name}-{scheme}.png"
            driver.save_screenshot(str(path))  # type: ignore[attr-defined]
            driver.set_window_size(1280, 900)  # type: ignore[attr-defined]
            saved.append(path)
            saved += picture_shots(driver, name, scheme, out)
    return saved


# ------------------------------------------------------------------------------ the download


def check_download(site: Path, base: str | None) -> tuple[int, list[str]]:
    """The suite archive and its .sha256 in ``site/assets/`` are exactly the committed ones
    (and, with ``base``, so is what the server sends): (files checked, problems)."""
    committed = {p.name: p.read_bytes() for p in sorted(ASSETS.glob(SUITE_GLOB))}
    built = {p.name: p for p in sorted((site / "assets").glob(SUITE_GLOB))}
    problems = [f"assets/{n}: committed, missing from the site" for n in committed.keys() - built]
    problems += [f"assets/{n}: on the site, not committed" for n in built.keys() - committed]
    archives = [n for n in committed if n.endswith(".tar.xz")]
    if len(archives) != 1:
        problems.append(f"docs/assets: expected one suite archive, found {archives}")
    for name in sorted(set(committed) & set(built)):
        if built[name].read_bytes() != committed[name]:
            problems.append(f"assets/{name}: differs from docs/assets/{name}")
        if base is not None:
            with urlopen(f"{base}assets/{name}", timeout=PAGE_TIMEOUT_S) as response:
                if response.read() != committed[name]:
                    problems.append(f"assets/{name}: the server sends other bytes")
    for name in archives:
        line = committed.get(f"{name}.sha256", b"").decode("ascii", "replace")
        want = f"{hashlib.sha256(committed[name]).hexdigest()}  {name}\n"
        if line != want:
            problems.append(f"assets/{name}.sha256: expected the line {want!r}, found {line!r}")
    return len(committed), problems


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-build", action="store_true", help="check a site already built")
    parser.add_argument(
        "--site", type=Path, default=SITE, help="the built site to check (default: site/)"
    )
    parser.add_argument("--shots", type=Path, default=SHOTS, help="screenshot folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not Path(binary).is_file():
            print(f"error: {binary} not found: apt-get install chromium chromium-driver")
            return 2
    try:
        import selenium  # noqa: F401
    except ImportError:
        print('error: selenium is not installed: pip install -e ".[docs]"')
        return 2
    if not args.no_build:
        print(f"build     mkdocs build --strict: {build(args.site):.1f} s, no warnings")
    urls = pages(args.site)
    problems: list[str] = []
    with serve(args.site) as base, tempfile.TemporaryDirectory(prefix="check_site.") as profile:
        checked, found = check_download(args.site, base)
        problems += found
        print(f"download  {checked} suite files checked against docs/assets, {len(found)} wrong")
        with browser(Path(profile)) as driver:
            version = driver.capabilities.get("browserVersion", "?")  # type: ignore[attr-defined]
            print(f"browser   headless Chromium {version} at {base}")
            facts, found = visit_all(driver, base, urls)
            problems += found
            print(
                f"pages     {len(facts)} loaded, {len(found)} problems (console errors, empty "
                "pages, pictures that do not load or fit, titles unlike the navigation's, code "
                "that scrolls, a band under the title, the home page's buttons)"
            )
            checked, broken = check_links(base, args.site, facts)
            problems += broken
            print(f"links     {checked} same-site links and anchors checked, {len(broken)} broken")
            report, found = check_search(driver, base)
            problems += found
            for line in report:
                print(f"search    {line}")
            for path in screenshots(driver, base, args.shots):
                print(f"screenshot {path}")
    for problem in problems:
        print(f"FAIL {problem}")
    verdict = "FAIL" if problems else "PASS"
    print(
        f"{verdict} site check: {len(problems)} problems in {time.perf_counter() - started:.1f} s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        print(f"error: {CHROMIUM} not found: apt-get install chromium chromium-driver")
        sys.exit(2)
    sys.exit(main())
