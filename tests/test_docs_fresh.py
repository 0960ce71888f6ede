"""The spec pages are what the generator makes of the spec, and every requirement id is sound.

* the generated regions of docs/ are fresh (``python -m tools.docgen --check`` would pass);
* every requirement of :data:`spec.requirements.REQUIREMENTS` is rendered exactly once, as an
  anchor, in ``docs/spec/format.md``;
* every id cited by the error registry or in ``[XXX-n]`` citations of ``spec/*.py`` and
  ``reference/*.py`` exists;
* the ids are well formed and unique; links into ``format.md`` land on an anchor.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import pytest

from spec.registry import ERROR_CODES
from spec.requirements import REQUIREMENT_BY_ID, REQUIREMENTS
from tools import docgen

ROOT = Path(__file__).resolve().parents[1]
FORMAT_MD = ROOT / "docs" / "spec" / "format.md"
#: Every page that states requirements: format.md, and the pages of the prefixes stated apart
#: (docgen.REQUIREMENT_PAGES: file sets).
STATEMENT_PAGES = (FORMAT_MD, *sorted(set(docgen.REQUIREMENT_PAGES.values())))


def _home(rid: str) -> Path:
    return docgen.REQUIREMENT_PAGES.get(docgen.requirement_prefix(rid), FORMAT_MD)


RATIONALE_MD = ROOT / "docs" / "spec" / "rationale.md"

ID_RE = re.compile(r"^(?P<prefix>[A-Z][A-Z0-9]{0,4})-(?P<number>[1-9][0-9]*)$")
ANCHOR_RE = re.compile(r'<a id="([^"]+)"></a>')
BRACKET_RE = re.compile(r"\[([^\[\]\n]+)\]")
#: One citation inside brackets: an id, a range (``ABC-1..ABC-7``, ``ABC-1..4``) or ``ABC-*``.
CITATION_RE = re.compile(
    r"^(?P<prefix>[A-Z][A-Z0-9]{0,4})-(?:(?P<star>\*)|(?P<first>[0-9]+)"
    r"(?:\.\.(?:(?P=prefix)-)?(?P<last>[0-9]+))?)$"
)
#: Dangling citations already reported, by (file, id): a fix makes the entry unnecessary.
#: spec/registry.py cites ERR-1 in the ErrorCode docstring, an id that was never defined; it
#: means the statement on reporting failures (the third of the reading section).
KNOWN_DANGLING = {("spec/registry.py", "ERR-1")}

PREFIXES = {ID_RE.match(r.id).group("prefix") for r in REQUIREMENTS}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- (a) freshness


def test_generated_regions_are_fresh() -> None:
    stale = docgen.stale_files(docgen.doc_files())
    assert not stale, f"stale generated regions in {stale}: run python -m tools.regen"


def test_generator_is_deterministic() -> None:
    text = FORMAT_MD.read_text(encoding="utf-8")
    once = docgen.render_text(text, FORMAT_MD)
    assert docgen.render_text(once, FORMAT_MD) == once


def test_format_md_has_every_kind_of_region() -> None:
    text = FORMAT_MD.read_text(encoding="utf-8")
    regions = docgen.find_regions(text.split("\n"), FORMAT_MD)
    used = {(r.kind, r.arg) for r in regions}
    for struct in ("Header", "Trailer", "Entry"):
        assert ("struct", struct) in used
    for kind in ("index-sections", "dtypes", "layouts", "flags", "limits", "errors"):
        assert (kind, None) in used
    assert ("requirement-index", None) in used
    apart = set(docgen.REQUIREMENT_PAGES)
    assert {arg for kind, arg in used if kind == "requirements"} == PREFIXES - apart
    for prefix, page in docgen.REQUIREMENT_PAGES.items():
        lines = page.read_text(encoding="utf-8").split("\n")
        here = {(r.kind, r.arg) for r in docgen.find_regions(lines, page)}
        assert ("requirements", prefix) in here, page


def test_check_mode_reports_and_write_mode_fixes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n<!-- BEGIN GENERATED: limits -->\nold\n<!-- END GENERATED -->\n")
    before = page.read_text()
    assert docgen.main(["--check", str(page)]) == 1
    assert page.read_text() == before  # --check writes nothing
    assert docgen.main([str(page)]) == 0
    assert "max_tensors" in page.read_text()
    assert docgen.main(["--check", str(page)]) == 0


def test_foreign_regions_are_left_alone(tmp_path: Path) -> None:
    text = "<!-- BEGIN GENERATED: codec-example -->\nkept as is\n<!-- END GENERATED -->\n"
    assert docgen.render_text(text, tmp_path / "x.md") == text


@pytest.mark.parametrize(
    "text",
    [
        "<!-- BEGIN GENERATED: no-such-kind -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: limits -->\n",
        "<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: struct Nope -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: requirements NOPE -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: dtypes extra -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: requirement-list -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: requirement-list RD-1,NOPE-1 -->\n<!-- END GENERATED -->\n",
        "<!-- BEGIN GENERATED: limits -->\n<!-- BEGIN GENERATED: dtypes -->\n"
        "<!-- END GENERATED -->\n",
    ],
)
def test_malformed_regions_exit_2(tmp_path: Path, text: str) -> None:
    page = tmp_path / "bad.md"
    page.write_text(text)
    assert docgen.main(["--check", str(page)]) == 2


def test_requirement_list_quotes_statements_with_links_not_anchors() -> None:
    page = ROOT / "docs" / "spec" / "security.md"
    text = "<!-- BEGIN GENERATED: requirement-list RD-2,LIM,RD-1 -->\n<!-- END GENERATED -->"
    out = docgen.render_text(text, page)
    chosen = [REQUIREMENT_BY_ID["RD-2"]]
    chosen += [r for r in REQUIREMENTS if r.id.startswith("LIM-")] + [REQUIREMENT_BY_ID["RD-1"]]
    items = [line for line in out.split("\n") if line.startswith("- ")]
    assert items == [f"- [{r.id}](format.md#{r.id}) ({r.level}) {r.text}" for r in chosen]
    assert not ANCHOR_RE.findall(out)


def test_docgen_imports_only_spec() -> None:
    tree = ast.parse((ROOT / "tools" / "docgen.py").read_text(encoding="utf-8"))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    assert not {m for m in modules if m.split(".")[0] == "reference"}


# --------------------------------------------------------------------------- (b) anchors


def test_every_requirement_is_rendered_once_as_an_anchor() -> None:
    """Once in all, on its home page."""
    found = {page: ANCHOR_RE.findall(page.read_text(encoding="utf-8")) for page in STATEMENT_PAGES}
    statements = {page: [a for a in anchors if a in REQUIREMENT_BY_ID]
                  for page, anchors in found.items()}  # fmt: skip
    every = [a for anchors in statements.values() for a in anchors]
    counts = {rid: every.count(rid) for rid in REQUIREMENT_BY_ID}
    assert {rid: n for rid, n in counts.items() if n != 1} == {}
    for page, anchors in statements.items():
        assert [a for a in anchors if _home(a) != page] == [], page
    format_anchors = found[FORMAT_MD]
    assert sorted(set(format_anchors) - set(REQUIREMENT_BY_ID)) == []


def test_each_statement_is_rendered_with_its_level_and_text() -> None:
    texts = {page: page.read_text(encoding="utf-8") for page in STATEMENT_PAGES}
    for req in REQUIREMENTS:
        assert docgen.requirement_item(req) in texts[_home(req.id)], req.id


# --------------------------------------------------------------------------- (c) citations


def _expand(token: str) -> list[str] | None:
    """Ids named by one citation token; None when the token is not a citation."""
    match = CITATION_RE.match(token.strip())
    if match is None:
        return None
    prefix = match.group("prefix")
    if match.group("star"):
        return [f"{prefix}-*"]
    first = int(match.group("first"))
    last = int(match.group("last") or first)
    return [f"{prefix}-{n}" for n in range(first, last + 1)]


def citations_in(text: str) -> list[str]:
    """Ids cited in ``[...]`` groups made only of citations (``[ABC-5, XY-6]``)."""
    cited: list[str] = []
    for group in BRACKET_RE.findall(text):
        expanded = [_expand(token) for token in group.split(",")]
        if expanded and all(ids is not None for ids in expanded):
            cited.extend(rid for ids in expanded if ids for rid in ids)
    return cited


def _exists(rid: str) -> bool:
    if rid.endswith("-*"):
        return rid[:-2] in PREFIXES
    return rid in REQUIREMENT_BY_ID


def test_citation_parser() -> None:
    # made-up prefixes, so that the traceability table does not count this file as a test
    assert citations_in("see [ABC-1..ABC-7] and [XY-1..4]") == [
        *(f"ABC-{n}" for n in range(1, 8)),
        *(f"XY-{n}" for n in range(1, 5)),
    ]
    assert citations_in("[QQ-*, ZZ-2] buf[:HEADER] h['x'] [UTF8]") == ["QQ-*", "ZZ-2"]


def test_error_registry_cites_existing_requirements() -> None:
    missing = {e.code: rid for e in ERROR_CODES for rid in e.requirements if not _exists(rid)}
    assert missing == {}


@pytest.mark.parametrize(
    "path",
    sorted([*ROOT.glob("spec/*.py"), *ROOT.glob("reference/**/*.py"), *ROOT.glob("tools/**/*.py")]),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_code_cites_existing_requirements(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    cited = citations_in(path.read_text(encoding="utf-8"))
    dangling = sorted(
        {rid for rid in cited if not _exists(rid)} - {r for f, r in KNOWN_DANGLING if f == rel}
    )
    assert dangling == [], f"{rel} cites requirement ids that do not exist: {dangling}"


# --------------------------------------------------------------------------- (d) ids


def test_ids_are_unique_and_well_formed() -> None:
    ids = [r.id for r in REQUIREMENTS]
    assert len(ids) == len(set(ids))
    assert [rid for rid in ids if not ID_RE.match(rid)] == []
    for req in REQUIREMENTS:
        assert req.level in ("MUST", "SHOULD", "MAY"), req.id
        assert req.level in req.text, f"{req.id}: level {req.level} not in its text"
        assert req.subject in (
            "file",
            "reader",
            "runtime",
            "writer",
            "converter",
            "spec",
            "adapter",
            "set",
        ), req.id
        assert req.text == req.text.strip() and "\n" not in req.text, req.id


def test_ids_of_a_prefix_are_numbered_in_order() -> None:
    numbers: dict[str, list[int]] = {}
    for req in REQUIREMENTS:
        match = ID_RE.match(req.id)
        assert match is not None
        numbers.setdefault(match.group("prefix"), []).append(int(match.group("number")))
    for prefix, seen in numbers.items():
        assert seen == sorted(seen), f"{prefix} ids out of order: {seen}"


# --------------------------------------------------------------------------- links


def _slug(heading: str) -> str:
    """Python-Markdown's default ``toc`` slug, which mkdocs uses for heading anchors."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _page_anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", _without_code_blocks(text), flags=re.M)
    return set(ANCHOR_RE.findall(text)) | {_slug(h) for h in headings}


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def test_links_into_format_md_land_on_an_anchor() -> None:
    """And links into every other page that states requirements."""
    anchors = {page.resolve(): _page_anchors(page) for page in STATEMENT_PAGES}
    broken = []
    for page in docgen.doc_files():
        text = _without_code_blocks(page.read_text(encoding="utf-8"))
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            landing = (page.parent / target).resolve() if target else page.resolve()
            if landing not in anchors:
                continue  # a page that states no requirement
            if anchor not in anchors[landing]:
                broken.append(f"{page.relative_to(ROOT)}: #{anchor}")
    assert broken == []


@pytest.mark.parametrize("page", [FORMAT_MD, RATIONALE_MD], ids=lambda p: p.name)
def test_relative_page_links_exist(page: Path) -> None:
    text = _without_code_blocks(page.read_text(encoding="utf-8"))
    targets = re.findall(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)", text)
    assert [t for t in targets if not (page.parent / t).exists()] == []
