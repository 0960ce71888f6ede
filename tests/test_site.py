"""The site: generated parts fresh, examples that run, a nav that names every page.

* ``python -m tools.sitegen --check`` would pass (vector catalogue, CLI reference,
  byte-by-byte walkthrough, the pictures: byte map, file sets, Marlin against AWQ);
* the whole-model load chart of ``docs/benchmarks.md`` draws that page's table
  (``python bench/plot_results.py --check`` would pass), and each picture generated whole
  is drawn from its facts: the Marlin word of the codec picture is the chapter's check value;
* every Python block of ``docs/reference/index.md`` runs, in order, in an empty folder;
* the shell adapter of ``docs/conformance/index.md`` passes vectors through the runner;
* ``mkdocs.yml`` names every page under ``docs/`` and nothing else, in plain configuration.

The browser check (``.ci/check_site.py``) needs mkdocs and Chromium and runs in CI after
these tests.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tools import docgen, sitegen

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"


def _blocks(page: Path, lang: str) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}[^\n]*\n(.*?)^```", text, flags=re.M | re.S)


# ------------------------------------------------------------------------------ generated


def test_generated_site_parts_are_fresh() -> None:
    stale = [p.relative_to(ROOT).as_posix() for p in sitegen.stale()]
    assert stale == [], f"stale: {stale}; run python -m tools.regen"


def test_sitegen_check_mode_exit_status() -> None:
    assert sitegen.main(["--check"]) == 0


def test_benchmark_chart_draws_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    plot = importlib.import_module("plot_results")
    cases = plot.read_cases(plot.PAGE.read_text(encoding="utf-8"))
    assert [c.key for c in cases] == ["a", "b", "b3", "c", "c4", "d"]
    assert plot.main(["--check"]) == 0, "stale chart: run python bench/plot_results.py"
    svg = plot.CHART.read_text(encoding="utf-8")
    for case in cases:  # every figure of the table is printed on its bar
        assert f">{case.warm:.3f} s<" in svg and f">{case.cold:.3f} s<" in svg, case


def test_codec_picture_shows_the_check_value() -> None:
    """The Marlin word drawn is the codec chapter's check value, the AWQ word its ORDER."""
    marlin = sitegen._marlin_cells((0,))
    by_field = sorted((f, cell) for cell, (_, f) in marlin.items())
    assert [cell for _, cell in by_field] == [
        (0, 0), (8, 0), (0, 8), (8, 8), (1, 0), (9, 0), (1, 8), (9, 8)
    ]  # fmt: skip
    awq = {f: cell for cell, (w, f) in sitegen._awq_cells().items() if w == 0}
    assert [awq[f] for f in range(8)] == [(0, c) for c in (0, 2, 4, 6, 1, 3, 5, 7)]


def test_docgen_leaves_site_regions_alone(tmp_path: Path) -> None:
    text = "<!-- BEGIN GENERATED: site-vectors -->\nkept\n<!-- END GENERATED -->\n"
    assert docgen.render_text(text, tmp_path / "x.md") == text


@pytest.mark.parametrize(
    "text",
    [
        "<!-- BEGIN GENERATED: site-nope -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: site-vectors -->\n",
        "<!-- BEGIN GENERATED: site-cli no.such.module -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: site-cli -->\n<!-- END GENERATED -->\n",
    ],
)
def test_malformed_site_regions_are_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(sitegen.SitegenError):
        sitegen.render_text(text, DOCS / "x.md")


def test_catalogue_lists_every_vector_once() -> None:
    page = (DOCS / "conformance" / "vectors.md").read_text(encoding="utf-8")
    ids = [v["id"] for v in sitegen._load_manifest()["vectors"]]
    assert {i: page.count(f'<a id="{i}"></a>') for i in ids} == dict.fromkeys(ids, 1)


def test_cli_reference_names_every_option() -> None:
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for module in sitegen.CLI_MODULES:
        for action in sitegen._parser(module)._actions:
            for option in action.option_strings:
                assert f"`{option}" in page, f"{module} {option}"


def test_walkthrough_checksums_all_match() -> None:
    page = (DOCS / "reference" / "walkthrough.md").read_text(encoding="utf-8")
    assert "MISMATCH" not in page
    assert page.count("(match)") >= 5


def test_spec_imports_neither_reference_nor_conformance() -> None:
    """The arrow points one way: spec/ never imports the site generator or the reference."""
    for path in (ROOT / "spec").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) (reference|conformance)\b", text, re.M), path


def test_no_package_imports_the_tools() -> None:
    """The arrows end at tools/: the installed packages never import the generators."""
    for package in ("spec", "reference", "conformance"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"^\s*(from|import) tools\b", text, re.M), path


# ------------------------------------------------------------------------------ examples


def test_python_examples_of_the_api_page_run(tmp_path: Path, monkeypatch) -> None:
    blocks = _blocks(DOCS / "reference" / "index.md", "python")
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"docs/reference/index.md, python block {number}", "exec")
        exec(code, namespace)


def stand_in_loader(python: str) -> str:
    """``my_loader describe FILE``: the reference adapter run by ``python``, reporting errors as
    ``ERROR CODE`` + status 3, the conventions the page's adapter translates."""
    return f"""#!/bin/sh
# my_loader describe FILE: the reference adapter, reporting errors as `ERROR CODE` + status 3
out=$({python} -m conformance.adapters.reference "$2")
status=$?
if [ "$status" -eq 0 ]; then printf '%s\\n' "$out"; exit 0; fi
code=$(printf '%s' "$out" | {python} -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])')
echo "ERROR $code from the stand-in" >&2
exit 3
"""


def write_page_adapter(folder: Path, python: str = sys.executable) -> Path:
    """The shell adapter of the conformance page, word for word, as ``folder/adapter.sh``, and
    the stand-in ``folder/my_loader`` it wraps (put ``folder`` on PATH); returns the adapter."""
    adapters = [
        b
        for b in _blocks(DOCS / "conformance" / "index.md", r"sh title=\"adapter\.sh\"")
        if b.startswith("#!/bin/sh")
    ]
    assert len(adapters) == 1
    for name, text in (("adapter.sh", adapters[0]), ("my_loader", stand_in_loader(python))):
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder / "adapter.sh"


def test_shell_adapter_of_the_conformance_page_passes(tmp_path: Path) -> None:
    adapter = write_page_adapter(tmp_path)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "conformance.run", "--quiet"]
    argv += ["--loader", f"mine={adapter} {{file}}"]
    argv += ["--only", "^(y_metadata_nested|n_bad_magic|n_truncated_in_magic)$"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mine: y_ 1/1, n_ 2/2; 3 passed, 0 failed" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------ nav


def _nav_pages() -> list[str]:
    text = MKDOCS_YML.read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return re.findall(r":\s+([\w./-]+\.md)\s*$", nav, flags=re.M)


def test_nav_names_every_page_and_only_existing_ones() -> None:
    nav = _nav_pages()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == sorted(nav), "a page is twice in the nav"
    assert sorted(set(pages) - set(nav)) == [], "pages missing from the nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries without a page"


def test_configuration_is_plain() -> None:
    """No theme overrides or hooks: the same mkdocs.yml has to build with Zensical."""
    text = MKDOCS_YML.read_text(encoding="utf-8")
    for pattern in (r"^\s*custom_dir:", r"^hooks:", r"!!python"):
        assert not re.search(pattern, text, re.M), pattern
    assert re.search(r"^strict: true$", text, re.M)
