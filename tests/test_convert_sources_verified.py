"""Resharding validates and verifies its AWQ-v2 source before writing (issue 38, items 2, 3
and 4): a rank set whose manifest contradicts its members' records of their ranks [SET-15],
a flipped payload bit [ENT-10] or a member whose SHA-256 is not the manifest's [SET-8] is
refused, never re-encoded under fresh checksums; the rules a rank set records are checked as
``--tp-rules`` are, in a pattern language Python's ``re`` matches without catastrophic
backtracking."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import reference
from reference.convert import convert_folder
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.ground.errors import FormatError
from reference.sets import tpsplit
from reference.sets.tpsplit import FAMILIES, read_rules, recorded_plan
from spec.constants import MAX_NAME_LENGTH, SET_MANIFEST

ROOT = Path(__file__).resolve().parents[1]
#: 2 key/value heads, so that T = 4 is possible (each head on two ranks) [SET-12].
WIDE = LlamaShape(hidden_size=512, intermediate_size=1024, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000, attention_bias=True)  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One checkpoint written as a single file, a rank set of 2 and a rank set of 4."""
    root = tmp_path_factory.mktemp("verified")
    src = write_checkpoint(root / "ckpt", WIDE)
    out = {"ckpt": src}
    for name, options in {"file": {}, "tp2": {"tp_size": 2}, "tp4": {"tp_size": 4}}.items():
        out[name] = root / name
        convert_folder(src, out[name], jobs=2, **options)
    return out


def _copy(models: dict[str, Path], name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(models[name], tmp_path / f"src-{name}"))


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / SET_MANIFEST).read_text(encoding="utf-8"))


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / SET_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = convert_main([*argv, "--quiet", "--jobs", "1"])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return status, err


@pytest.mark.parametrize("dst", ["joined.awq2", "resharded"])
def test_a_rank_set_whose_manifest_swaps_two_ranks_is_refused(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], dst: str
) -> None:
    """Item 2: ranks 0 and 1 swapped in the manifest (every member's size, header_crc and
    SHA-256 still the manifest's) gave 44 wrong tensors and "verified: yes"; SET-15 refuses
    it, naming the member, before anything is written."""
    src = _copy(models, "tp2", tmp_path)
    manifest = _manifest(src)
    first, second = manifest["files"][0], manifest["files"][1]
    first["rank"], second["rank"] = second["rank"], first["rank"]
    _write_manifest(src, manifest)
    extra = ["--tp", "2"] if not dst.endswith(".awq2") else []
    status, err = _refused([str(src), str(tmp_path / dst), *extra], capsys)
    assert status == 1, err
    assert "[SET_WRONG_RANK]" in err and first["name"] in err, err
    assert not (tmp_path / dst).exists()


def test_the_first_ranks_of_a_tp4_set_listed_as_tp2_are_refused(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 2: ranks 0 and 1 of a T = 4 set listed as a set of 2 (a ValueError traceback
    before): each member records tp_size 4 [SET-15]."""
    src = _copy(models, "tp4", tmp_path)
    manifest = _manifest(src)
    manifest["tp_size"], manifest["files"] = 2, manifest["files"][:2]
    for extra in manifest_rest(src, keep=2):
        extra.unlink()
    _write_manifest(src, manifest)
    status, err = _refused([str(src), str(tmp_path / "out.awq2")], capsys)
    assert status == 1, err
    assert "[SET_WRONG_RANK]" in err and "model-tp4-rank0.awq2" in err, err
    assert not (tmp_path / "out.awq2").exists()


def manifest_rest(folder: Path, *, keep: int) -> list[Path]:
    """The member files after the first ``keep`` (in name order)."""
    return sorted(folder.glob("*.awq2"))[keep:]


def _flip_payload_bit(path: Path) -> None:
    """One bit of the first quantised layer's qweight payload, flipped in place."""
    with reference.open(path) as f:
        info = next(e for e in f.entries() if e.name.endswith(".qweight"))
        offset = info.offset + info.length // 2
    with open(path, "r+b") as raw:
        raw.seek(offset)
        byte = raw.read(1)[0]
        raw.seek(offset)
        raw.write(bytes([byte ^ 0x10]))


@pytest.mark.parametrize("layout", ["file", "tp2"])
def test_a_flipped_payload_bit_is_refused_not_laundered(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    """Item 3: one flipped payload bit was re-encoded under fresh checksums (exit 0); the
    source's payload checksums are now verified first [ENT-10]."""
    src = _copy(models, layout, tmp_path)
    member = src / ("model.awq2" if layout == "file" else "model-tp2-rank1.awq2")
    _flip_payload_bit(member)
    for dst, extra in (("out.awq2", []), ("out-folder", ["--tp", "2"])):
        status, err = _refused([str(src), str(tmp_path / dst), *extra], capsys)
        assert status == 1, err
        assert "[BAD_TENSOR_CHECKSUM]" in err, err
        assert member.name in err, err
        assert not (tmp_path / dst).exists()


def test_a_member_whose_sha256_is_not_the_manifests_is_refused(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 3: every member's SHA-256 is compared with the manifest's [SET-8]."""
    src = _copy(models, "tp2", tmp_path)
    manifest = _manifest(src)
    manifest["files"][1]["sha256"] = "0" * 64
    _write_manifest(src, manifest)
    status, err = _refused([str(src), str(tmp_path / "out.awq2")], capsys)
    assert status == 1, err
    assert "[SET_BAD_SHA256]" in err and "model-tp2-rank1.awq2" in err, err
    assert not (tmp_path / "out.awq2").exists()


def test_a_verified_sets_digests_are_not_hashed_again(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 3's cost: a set whose provenance must be computed (it carries none) takes its
    members' SHA-256 from the manifest once verification has checked them: read once, not
    twice."""
    from reference.ground import hashing
    from reference.sources import awq2

    src = _copy(models, "tp2", tmp_path)
    calls: list[Path] = []
    real = hashing.sha256_of

    def counted(path: Path, **kw: Any) -> str:
        calls.append(path)
        return real(path, **kw)

    monkeypatch.setattr(hashing, "sha256_of", counted)
    original = awq2.Awq2Checkpoint.__init__

    def without_provenance(self: Any, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        if self.provenance is not None:  # as if it carried none
            self.provenance = None
            self.files = list(kw["files"])
            self.digests = kw.get("digests")

    monkeypatch.setattr(awq2.Awq2Checkpoint, "__init__", without_provenance)
    out = tmp_path / "out.awq2"
    assert convert_main([str(src), str(out), "--quiet", "--jobs", "2"]) == 0
    assert calls == []
    with reference.open(out) as f:
        files = f.metadata["provenance"]["source_files"]
    assert [x["sha256"] for x in files] == [m["sha256"] for m in _manifest(src)["files"]]


# ------------------------------------------------------------- item 4: the recorded rules


def _rank_set_recording(rules: list[list[str]], models: dict[str, Path], dst: Path) -> Path:
    """A rank set of 2 whose members record ``rules`` first under tensor_parallel (written
    with the table's rules, the record then given ``rules`` in front)."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from reference.convert import convert_folder
        from reference.sets import tpsplit
        real = tpsplit.SplitPlan.description
        def recorded(self):
            out = real(self)
            out["rules"] = [*{rules!r}, *out["rules"]]
            return out
        tpsplit.SplitPlan.description = recorded
        convert_folder(Path({str(models["ckpt"])!r}), Path({str(dst)!r}), tp_size=2, jobs=1)
    """)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=120)
    return dst


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("(", "unbalanced"),
        ("(.|.)*Z", "repeats a group holding"),
        ("(a+)+", "repeats a group holding"),
    ],
)
def test_recorded_rules_are_checked_and_never_backtrack_for_hours(
    models: dict[str, Path], tmp_path: Path, pattern: str, construct: str
) -> None:
    """SET-18 (issue 38, item 4): ``(`` gave a traceback and ``(.|.)*Z`` backtracked for
    hours; both are refused (TP_BAD_CONFIG) naming the rule and the construct, within
    seconds."""
    src = _rank_set_recording([[pattern, "replicated"]], models, tmp_path / "evil")
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "reference.convert", str(src),
                          str(tmp_path / "out.awq2"), "--quiet", "--jobs", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert time.perf_counter() - started < 60
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr, run.stderr
    assert "[TP_BAD_CONFIG]" in run.stderr and "rule 0" in run.stderr, run.stderr
    assert construct in run.stderr, run.stderr
    assert not (tmp_path / "out.awq2").exists()


def test_recorded_rules_are_bounded_in_number() -> None:
    described = {"tp_size": 2, "rule_family": None, "vocab_padding": tpsplit.VOCAB_PADDING,
                 "rules": [["a", "row"]] * (tpsplit.MAX_RULES + 1)}  # fmt: skip
    with pytest.raises(FormatError) as caught:
        recorded_plan(described)
    assert caught.value.code == "TP_BAD_CONFIG" and "rules" in caught.value.message


def test_tp_rules_files_use_the_same_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tp-rules`` with a pattern outside the language: a usage error naming the rule."""
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["x", "row"], ["(.|.)*Z", "column"]]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"rule 1: pattern '\(\.\|\.\)\*Z'"):
        read_rules(rules)
    with pytest.raises(SystemExit) as caught:
        convert_main([str(tmp_path), str(tmp_path / "out"), "--tp", "2", "--tp-rules",
                      str(rules)])  # fmt: skip
    assert caught.value.code == 2
    assert "repeats a group holding" in capsys.readouterr().err


def test_every_built_in_pattern_is_in_the_language() -> None:
    for table in FAMILIES.values():
        for pattern, _kind in table:
            tpsplit.check_pattern(pattern)


LEGAL = [
    r"model\.layers\.0\.mlp\.down_proj",
    r"(.+\.)?embed_tokens",
    r".+\.mlp\.experts\.(0|[1-9][0-9]*)\.(gate|up)_proj",
    r"^lm_head$",
    r".*\.layers\.\d+\.self_attn\.[qkv]_proj",
    r"(?:a|b|c)_proj",
    r"[^.]+\.weight",
    r"a|b|c",
]

ILLEGAL = [
    ("(", "unbalanced"),
    (")", "unbalanced"),
    ("[a-", "unterminated"),
    ("(a+)+", "repeats a group holding"),
    ("(a|a)*", "repeats a group holding"),
    ("(.|.)*Z", "repeats a group holding"),
    ("((ab)*)*", "repeats a group holding"),
    ("a**", "quantifier"),
    ("a*?", "quantifier"),
    ("a++", "quantifier"),
    ("a{2,9}", "counted repetition"),
    ("(?=a)", "(?="),
    ("(?P<x>a)", "(?P"),
    ("(a)\\1", "\\1"),
    ("\\bword", "\\b"),
    (".*.*.*x", "more than 2"),
    ("(a)?(a)?(a)?(a)?(a)?(a)?aaaaaa", "choices"),
    ("(((((a)))))", "nested"),
    ("a" * 257, "longer than"),
    ("a^b", "anchor"),
    ("a$b", "anchor"),
]


@pytest.mark.parametrize("pattern", LEGAL)
def test_legal_patterns_compile_as_python_does(pattern: str) -> None:
    import re

    compiled = tpsplit.compile_pattern(pattern)
    assert compiled.pattern == pattern and compiled == re.compile(pattern)


@pytest.mark.parametrize(("pattern", "construct"), ILLEGAL)
def test_illegal_patterns_are_refused_naming_the_construct(pattern: str, construct: str) -> None:
    """SET-18: every construct outside the language is refused, named."""
    with pytest.raises(ValueError) as caught:
        tpsplit.check_pattern(pattern)
    assert construct in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    "pattern",
    [
        r".*a.*a",
        r"(a)?(a)?(a)?(a)?.*.*b",
        r"(a|a)(a|a)(a|a)(a|a).*a.*b",
        r".+\.mlp\.experts\.(0|[1-9][0-9]*)\.(w[13]|gate_proj|up_proj)",
    ],
)
def test_the_worst_legal_patterns_match_a_longest_name_quickly(pattern: str) -> None:
    """Under the language the backtracking is bounded: no legal pattern takes long on a name
    of max_name_length bytes built to make it fail late."""
    tpsplit.check_pattern(pattern)
    compiled = tpsplit.compile_pattern(pattern)
    for name in ("a" * MAX_NAME_LENGTH, ".mlp.experts.0" * (MAX_NAME_LENGTH // 14)):
        started = time.perf_counter()
        compiled.fullmatch(name)
        assert time.perf_counter() - started < 2.0, (pattern, name[:20])
