"""``spec/awq2.ksy``, the Kaitai Struct description of the container.

Without node (the README's pytest command):

* the committed description and its site copy are what the generator makes of ``spec/``;
* its enums, read from the committed text, are the dtype and layout registries;
* its fixed structures have the spec's sizes (header 128, trailer 32, entry 64 bytes) and the
  schema's fields in order; every requirement id it cites exists;
* the YAML writer quotes what a YAML parser would read as something other than a string.

With node and npm (the pinned compiler is installed on first use, ``npm ci --prefix
tools/kaitai``; CI sets ``AWQ2_REQUIRE_KAITAI=1``, which turns a missing compiler into a
failure instead of a skip): ``python -m tools.kaitai`` passes
on the committed description and fails on copies with one field changed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from spec import schema
from spec.registry import DTYPES, LAYOUTS
from spec.requirements import REQUIREMENT_BY_ID
from tools.kaitai import ksy, yamltext
from tools.kaitai.check import main as check_main
from tools.kaitai.compiler import HERE, compiler_available

KSY_TEXT = ksy.KSY.read_text(encoding="utf-8")
#: Bytes of each Kaitai integer type (Kaitai's names: u8 is 8 bytes).
WIDTH = {"u1": 1, "u2": 2, "u4": 4, "u8": 8, "s4": 4}


def test_committed_ksy_is_generated() -> None:
    assert KSY_TEXT == ksy.render(), "spec/awq2.ksy is stale: run python -m tools.regen"
    assert ksy.SITE_COPY.read_text(encoding="utf-8") == KSY_TEXT


def _enum_from_text(text: str, name: str) -> dict[int, str]:
    """``code -> id`` of one enum, read line by line from the committed YAML."""
    block = re.search(
        rf"^  {name}:\n((?:    .*\n|      .*\n)+)", text.split("\nenums:\n", 1)[1], re.M
    )
    assert block, f"no enum {name}"
    pairs = re.findall(r"^    (\d+):\n      id: (\S+)$", block.group(1), re.M)
    return {int(code): ident for code, ident in pairs}


@pytest.mark.parametrize(("name", "registry"), [("dtype", DTYPES), ("layout", LAYOUTS)])
def test_enums_are_the_registries(name: str, registry: tuple) -> None:
    assert _enum_from_text(KSY_TEXT, name) == {r.code: r.name.lower() for r in registry}


def _seq_width(seq: list[dict]) -> int:
    total = 0
    for attr in seq:
        if "contents" in attr:
            total += len(attr["contents"])
        elif "type" in attr:
            total += WIDTH[attr["type"]]
        else:
            total += attr["size"]
    return total


@pytest.mark.parametrize(
    ("type_name", "size", "struct"),
    [("header", 128, schema.Header), ("trailer", 32, schema.Trailer), ("entry", 64, schema.Entry)],
)
def test_fixed_structures(type_name: str, size: int, struct) -> None:
    seq = ksy.document()["types"][type_name]["seq"]
    assert _seq_width(seq) == size  # the sizes docs/spec/format.md gives
    assert [a["id"] for a in seq] == [row["name"] for row in schema.field_table(struct)]


def test_magics_and_group_size_sign() -> None:
    types = ksy.document()["types"]
    assert bytes(types["header"]["seq"][0]["contents"]) == b"\x89AWQ\r\n\x1a\n"  # [HDR-1]
    assert bytes(types["trailer"]["seq"][-1]["contents"]) == b"\x89AWQEND\n"  # [TRL-1]
    group_size = next(a for a in types["entry"]["seq"] if a["id"] == "group_size")
    assert group_size["type"] == "s4"  # -1 means one group [LAY-4]


def test_cited_requirements_exist() -> None:
    cited = set()
    for bracket in re.findall(r"\[([A-Z]+-[0-9][^\]]*)\]", KSY_TEXT):
        for part in bracket.split(","):
            m = re.fullmatch(r"([A-Z]+)-(\d+)(?:\.\.(\d+))?", part.strip())
            assert m, f"not a citation: {part!r}"
            last = int(m.group(3) or m.group(2))
            cited |= {f"{m.group(1)}-{n}" for n in range(int(m.group(2)), last + 1)}
    assert cited and not cited - set(REQUIREMENT_BY_ID), sorted(cited - set(REQUIREMENT_BY_ID))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("header.index_offset", "header.index_offset"),
        ("_io.size - 32", "_io.size - 32"),
        ("(1 << b) + 1", '"(1 << b) + 1"'),
        ("yes", '"yes"'),
        ("No", '"No"'),
        ("a: b", '"a: b"'),
        ("# not a comment", '"# not a comment"'),
        ("zero [PAD-1]", '"zero [PAD-1]"'),
        ("0x10", '"0x10"'),
        (7, "7"),
        (True, "true"),
    ],
)
def test_yaml_scalars(value: object, text: str) -> None:
    assert yamltext.scalar(value) == text


def test_yaml_document() -> None:
    doc = {"meta": {"id": "x"}, "seq": [{"id": "a", "contents": [1, 2]}], "doc": "one\ntwo\n"}
    expected = "# c\nmeta:\n  id: x\nseq:\n  - id: a\n    contents: [1, 2]\ndoc: |\n  one\n  two\n"
    assert yamltext.dump(doc, "# c\n") == expected


# --------------------------------------------------------------------------- with the compiler


@pytest.fixture(scope="module")
def compiler() -> None:
    """The pinned compiler, installed on the spot with ``npm ci`` when node and npm are there
    (as the C loader is built on the spot); skipped only without node, unless CI's
    ``AWQ2_REQUIRE_KAITAI=1`` makes that a failure."""
    missing = compiler_available()
    if missing is not None and shutil.which("node") and shutil.which("npm"):
        subprocess.run(
            ["npm", "ci", "--prefix", str(HERE), "--no-audit", "--no-fund", "--silent"],
            check=False,
            capture_output=True,
        )
        missing = compiler_available()
    if missing is None:
        return
    if os.environ.get("AWQ2_REQUIRE_KAITAI") == "1":
        pytest.fail(f"AWQ2_REQUIRE_KAITAI=1 and the Kaitai compiler is missing: {missing}")
    pytest.skip(f"Kaitai compiler not installed ({missing})")


def test_check_passes(compiler: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main([]) == 0
    assert "0 disagree" in capsys.readouterr().out


def _broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    assert KSY_TEXT.count(old) == 1
    path = tmp_path / "broken.ksy"
    path.write_text(KSY_TEXT.replace(old, new), encoding="utf-8")
    return path


def test_check_fails_on_a_wrong_sign(
    compiler: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # group_size read unsigned: -1 (one group) becomes 4294967295, the file still parses
    path = _broken_copy(
        tmp_path, "- id: group_size\n        type: s4", "- id: group_size\n        type: u4"
    )
    assert check_main(["--ksy", str(path)]) == 1
    err = capsys.readouterr().err
    assert re.search(
        r"FAIL y_marlin_4bit_channelwise: entries\[\d+\]\.group_size: kaitai 4294967295, reference -1",
        err,
    )


def test_check_fails_on_a_wrong_width(
    compiler: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _broken_copy(tmp_path, "- id: ndim\n        type: u1", "- id: ndim\n        type: u2")
    assert check_main(["--ksy", str(path)]) == 1
    assert "FAIL y_sample: " in capsys.readouterr().err
