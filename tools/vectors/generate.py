"""``python -m tools.vectors.generate [--out DIR] [--record-release [--amend]]``: rebuild every
vector and the manifest.

Deterministic: fixed seeds, fixed order, no timestamps, so the committed files in
``conformance/vectors/`` and ``conformance/manifest.json`` are exactly what this
produces (a test checks it, and so does ``python -m tools.regen --check``).  Three
classes, JSONTestSuite style:

* ``y_*`` must be accepted, and the loader must report the expected content;
* ``n_*`` must be rejected, with the expected error code (``n_fuzz_*``: inputs that
  the fuzzer (``python -m tools.fuzz``, formerly ``bench/fuzz.py``) found crashing the
  reference reader, from ``tools.vectors.fuzz_findings``);
* ``i_*`` either: accepted with the expected content, or rejected with one of the
  listed codes (the spec leaves support optional).

Expected content is computed from the generator's own inputs, not by reading the
files back: payload hashes of dense tensors are hashes of the input arrays, and
for every quantised layer the codes, zero points, scales and dequantised weights
are hashed from the values drawn here, with the arithmetic written out here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance import exactjson
from reference.quant.dtypes import numpy_dtype
from spec.constants import MAX_NAME_LENGTH, SPEC_VERSION
from spec.registry import DTYPES
from tools.vectors import releases
from tools.vectors.content import (
    BASES,
    EXPERT_ROLES,
    Content,
    Vector,
    base_bytes,
    build,
    draw_layer,
    expert_layers,
    mutated,
    sample_content,
    sha256,
)
from tools.vectors.fuzz_findings import FUZZ_FINDINGS
from tools.vectors.mutations import MUTATIONS
from tools.vectors.sets import rank_content, set_vectors
from tools.vectors.surgery import FileEditor

HERE = Path(__file__).resolve().parents[2] / "conformance"
SCHEMAS = HERE / "schema"
MANIFEST_VERSION = 3
#: The suite's own semantic version: bump it whenever a file of the suite changes (a vector,
#: the manifest, a schema), and record it with ``--record-release`` (:mod:`tools.vectors.releases`;
#: ``python -m tools.regen --check`` fails until both are done).  Major: a loader that passed
#: may now fail (a new rule); minor: vectors added for existing rules; patch: descriptions.
SUITE_VERSION = "3.2.0"


def _accept(vid: str, reqs: tuple[str, ...], description: str, content: Content) -> Vector:
    data, expected = build(content)
    return Vector(vid, "accept", reqs, description, data, expected)


def _all_dtypes() -> Content:
    rng = np.random.default_rng(3)
    dense: list[tuple[str, np.ndarray, str | None]] = []
    for d in DTYPES:
        raw = rng.integers(0, 256, 6 * d.itemsize, dtype=np.uint8)
        array = raw.view(numpy_dtype(d.name)).reshape(2, 3)  # BF16, FP8: ml_dtypes arrays
        if d.name == "BOOL":
            array = (raw[:6] & 1).astype(bool).reshape(2, 3)
        dense.append((f"dtype.{d.name}", array, d.name))
    return Content(dense=dense)


def _group_label(group_size: int) -> str:
    return "channelwise" if group_size == -1 else f"g{group_size}"


def _marlin(bits: int, group_size: int, k: int = 256, n: int = 128, **kw: Any) -> Content:
    layer = draw_layer(
        f"layer.b{bits}.g{group_size}", k, n, bits, group_size, 10 * bits + group_size, **kw
    )
    return Content(layers=[layer], metadata={"case": f"{bits}-bit, group size {group_size}"})


#: META-5's longest number, 100 bytes, counted with or without the exponent's ``e`` and sign:
#: an integer of 100 digits, and a number whose mantissa alone is 95 bytes.
LONGEST_INTEGER = "1234567890" * 10
LONGEST_FLOAT = "-1." + "2345678901" * 9 + "23" + "e-300"
#: Numbers a binary64 parser and printer changes, each as the file writes it [ADP-1, META-5].
EXACT_NUMBERS = (
    b'{"above_2p53":12345678901234567890,"below_i64_min":-9223372036854775809,'
    b'"longest_integer":'
    + LONGEST_INTEGER.encode()
    + b',"longest_float":'
    + LONGEST_FLOAT.encode()
    + b',"underflows_to_0":1e-400,"minus_zero":-0,"one_point_zero":1.0,'
    b'"capital_exponent":1E5,"tenth":0.1,"rounds_to_1":1.0000000000000001,'
    b'"u64_max":18446744073709551615,"in_a_list":[-0.0,2e+0,0E-0,1.5e1,100]}'
)
#: Escapes and raw UTF-8 in keys and strings: compared after unescaping [ADP-1, META-1].
ESCAPES = (
    r'{"caf\u00e9":"\u00e9t\u00e9","\u00e9 raw: é":"été",'
    r'"pair \ud83d\ude00":"\ud83d\ude00","raw 😀":"😀",'
    r'"slash \/":"a\/b","quote \"":"\"q\"","backslash \\":"\\","nul \u0000":"a\u0000b",'
    r'"controls \b\f\n\r\t":"\u001f","\u6a21\u578b":"模型"}'
).encode()


def exact_metadata_vectors() -> list[Vector]:
    """Metadata that a JSON library built on binary64 and JavaScript strings reads and prints
    differently from the file [ADP-1]: long integers, META-5's longest number, an underflow,
    ``-0``, ``1.0``, ``1E5``; escapes of every kind beside raw UTF-8."""
    tensor: list[tuple[str, np.ndarray, str | None]] = [("x", np.arange(3, dtype=np.uint8), None)]
    assert len(LONGEST_INTEGER) == len(LONGEST_FLOAT) == 100
    return [
        _accept(
            "y_metadata_exact_numbers",
            ("ADP-1", "META-2", "META-5"),
            "numbers as written: 12345678901234567890, -9223372036854775809, 100-byte numbers "
            "(with and without an exponent), 1e-400 (0 in binary64, valid), -0, 1.0, 1E5, 0.1, "
            "1.0000000000000001",
            Content(dense=tensor, metadata_raw=EXACT_NUMBERS),
        ),
        _accept(
            "y_metadata_largest_finite",
            ("META-5",),
            "1.7976931348623158e308, below the midpoint between the largest binary64 and 2**1024: "
            "rounded to nearest it is the largest binary64, finite",
            Content(dense=tensor, metadata_raw=b'{"a":1.7976931348623158e308}'),
        ),
        _accept(
            "y_metadata_escapes",
            ("ADP-1", "META-1", "META-2", "META-5"),
            'keys and strings with \\u00e9, a surrogate pair, \\/, \\", \\\\, \\u0000 and '
            "controls, beside the same letters in raw UTF-8",
            Content(dense=tensor, metadata_raw=ESCAPES),
        ),
    ]


def huge_dims_vectors() -> list[Vector]:
    """Zero-size tensors with dims binary64 cannot hold, on the valid side of ENT-5's bound
    (the non-zero dims x item size below 2**63); tools.vectors.mutations has the other side."""
    from tools.vectors.mutations import OVER_103, THIRD

    def zeros(*shape: int, dtype: Any = np.uint8) -> np.ndarray:
        return np.zeros(shape, dtype)

    cases = [
        ("y_dim_2p53_plus_1", "U8 [0, 2**53 + 1] and [2**53 + 1, 0]: not a binary64 value",
         [("a", zeros(0, (1 << 53) + 1)), ("b", zeros((1 << 53) + 1, 0))]),
        ("y_dim_u8_2p63_minus_1", "U8 [0, 2**63 - 1] and [2**63 - 1, 0]: just below ENT-5's bound",
         [("a", zeros(0, (1 << 63) - 1)), ("b", zeros((1 << 63) - 1, 0))]),
        ("y_dim_f16_2p62_minus_1", "F16 [0, 2**62 - 1]: x 2 = 2**63 - 2",
         [("a", zeros(0, (1 << 62) - 1, dtype=np.float16))]),
        ("y_dims_u8_3_by_third", f"U8 [0, 3, {THIRD}]: 3 x {THIRD} = 2**63 - 2",
         [("a", zeros(0, 3, THIRD))]),
        ("y_dims_u8_103_below_2p63", f"U8 [0, 103, {OVER_103 - 1}]: 2**63 - 79",
         [("a", zeros(0, 103, OVER_103 - 1))]),
    ]  # fmt: skip
    return [
        _accept(vid, ("ENT-5", "ENT-6", "ADP-2"), description,
                Content(dense=[(name, array, None) for name, array in tensors]))
        for vid, description, tensors in cases
    ]  # fmt: skip


def accept_vectors() -> list[Vector]:
    rng = np.random.default_rng(99)
    longest = "L" * (MAX_NAME_LENGTH - 2) + "é"  # 1024 bytes: 1022 ASCII + one 2-byte letter
    many = Content(
        dense=[
            (f"model.layers.{i // 10}.part{i % 10}", np.zeros(0, np.float16), None)
            for i in range(3000)
        ]
    )
    vectors = [
        _accept(
            "y_empty_file", ("FILE-4", "IDX-5", "SLAB-5"), "no tensors, no metadata", Content()
        ),
        _accept(
            "y_all_dtypes",
            ("ENT-4", "ENT-8"),
            "every registered dtype, shape [2, 3]",
            _all_dtypes(),
        ),
        _accept(
            "y_empty_and_0d",
            ("ENT-6", "SLAB-5"),
            "zero-length payloads and a 0-d tensor",
            Content(
                dense=[
                    ("zero_rows", np.zeros((0, 5), np.float32), None),
                    ("zero_cols", np.zeros((3, 0), np.int8), None),
                    ("scalar", np.array(-1.5, np.float64), None),
                    ("after", np.arange(5, dtype=np.uint16), None),
                ]
            ),
        ),
        _accept(
            "y_unicode_names",
            ("NAME-2",),
            "names in several scripts",
            Content(
                dense=[
                    ("模型.权重", np.ones(2, np.float16), None),
                    ("résumé", np.zeros(1, np.int8), None),
                    ("emoji.🙂", np.arange(3, dtype=np.int16), None),
                    ("Ωμέγα", np.ones((1, 1), np.float32), None),
                ],
                metadata={"langue": "français", "語": ["日本語"]},
            ),
        ),
        _accept(
            "y_longest_name",
            ("LIM-3", "NAME-2"),
            "a 1024-byte name",
            Content(dense=[(longest, np.ones(1, np.uint8), None)]),
        ),
        _accept(
            "y_many_tensors",
            ("IDX-5", "IDX-6", "IDX-8", "IDX-9"),
            "3000 tensors: many buckets, several shared",
            many,
        ),
        _accept(
            "y_large_payload",
            ("SLAB-2", "SLAB-5", "PAD-2"),
            "payloads spanning several 64 KiB blocks",
            Content(
                dense=[
                    ("big", rng.standard_normal((300, 200)).astype(np.float32), None),
                    ("small", np.ones(3, np.float16), None),
                ]
            ),
        ),
        _accept(
            "y_metadata_absent",
            ("META-1",),
            "metadata_length 0",
            Content(dense=[("x", np.ones(2), None)]),
        ),
        _accept(
            "y_metadata_nested",
            ("META-2", "META-3", "LIM-5"),
            "nested metadata",
            Content(
                dense=[("x", np.ones(2), None)],
                metadata={
                    "config": {"a": [1, 2, {"b": None}], "c": True},
                    "provenance": {"files": []},
                },
            ),
        ),
        *exact_metadata_vectors(),
        *huge_dims_vectors(),
    ]
    for g in (-1, 32, 64, 128):
        vectors.append(
            _accept(
                f"y_marlin_4bit_{_group_label(g)}",
                ("LAY-4", "LAY-5", "LAY-8"),
                f"4-bit Marlin layer, group size {g}",
                _marlin(4, g),
            )
        )
    vectors.append(
        _accept(
            "y_marlin_4bit_group_equals_k",
            ("LAY-4", "LAY-5"),
            "group size == k (channelwise scale map)",
            _marlin(4, 128, k=128),
        )
    )
    vectors.append(
        _accept(
            "y_metadata_feff_in_string",
            ("META-1",),
            "U+FEFF inside strings (a key starts with it): an ordinary character, not a BOM",
            Content(
                dense=[("x", np.ones(2), None)],
                metadata={"\ufeffkey": "a\ufeffb", "plain": "\ufeff"},
            ),
        )
    )
    vectors.append(
        _accept(
            "y_bias_outside_layer",
            ("LAY-10", "NAME-4"),
            "tensors named <prefix>.bias with no quantised <prefix>.qweight: ordinary tensors",
            Content(
                dense=[
                    ("head.bias", np.arange(6, dtype=np.int8).reshape(2, 3), None),
                    ("dense.qweight", np.arange(4, dtype=np.int32), None),
                    ("dense.bias", np.arange(7, dtype=np.uint8), None),
                ]
            ),
        )
    )
    vectors.append(
        _accept(
            "y_marlin_4bit_bias",
            ("NAME-4", "LAY-7", "LAY-10"),
            "layer with a plain fp16 bias",
            Content(layers=[draw_layer("proj", 256, 192, 4, 128, 5, bias=True)]),
        )
    )
    vectors.append(
        _accept(
            "y_moe_expert_set",
            ("LAY-12", "LAY-7"),
            "a mixture-of-experts module's experts 0 and 1, each gate_proj, up_proj and "
            "down_proj as an ordinary 4-bit Marlin layer of group size 128 (hidden and "
            "intermediate size 128), under model.layers.0.mlp.experts",
            Content(
                layers=expert_layers(
                    "model.layers.0.mlp.experts", EXPERT_ROLES, 2, 128, 128, seed=30
                )
            ),
        )
    )
    vectors.append(
        _accept(
            "y_marlin_4bit_bf16_scales",
            ("LAY-6",),
            "bf16 scales kept as stored",
            _marlin(4, 64, scale_dtype="BF16"),
        )
    )
    vectors.append(
        _accept(
            "y_marlin_4bit_f32_scales", ("LAY-6",), "f32 scales", _marlin(4, 32, scale_dtype="F32")
        )
    )
    vectors.append(
        _accept(
            "y_awq_layout_n_not_64",
            ("LAY-8", "LAY-5"),
            "n = 72: AWQ v1 layout",
            Content(layers=[draw_layer("odd_n", 256, 72, 4, 64, 6)]),
        )
    )
    vectors.append(
        _accept(
            "y_awq_layout_k_not_128",
            ("LAY-8", "LAY-5"),
            "k = 192: AWQ v1 layout",
            Content(layers=[draw_layer("odd_k", 192, 128, 4, 64, 7)]),
        )
    )
    vectors.append(
        _accept(
            "y_awq_layout_group_256",
            ("LAY-4", "LAY-8"),
            "group size 256: AWQ v1 layout",
            Content(layers=[draw_layer("g256", 512, 64, 4, 256, 8)]),
        )
    )
    vectors.append(_empty_payloads_anywhere())
    sample = sample_content()
    vectors.append(
        _accept(
            "y_sample",
            ("RD-1", "RD-2", "FILE-3", "IDX-2", "CRC-1", "ENT-7", "ENT-9"),
            "the base of the must-reject vectors",
            sample,
        )
    )
    data, expected = build(sample)
    future = FileEditor(data).set_header(optional_flags=0xFFFF_0000_0000_0001).refresh().bytes()
    vectors.append(
        Vector(
            "y_unknown_optional_flags", "accept", ("VER-4",), "optional flags set", future, expected
        )
    )
    minor = FileEditor(data).set_header(version_minor=7, reserved2=b"future!!").refresh().bytes()
    vectors.append(
        Vector(
            "y_unknown_minor_version",
            "accept",
            ("VER-1", "HDR-5"),
            "version 2.7 using reserved bytes",
            minor,
            expected,
        )
    )
    # a reader of spec 2.1 implements file format 2.0: its own minor version is 0 [HDR-5]
    minor_1 = FileEditor(data).set_header(version_minor=1, reserved1=b"\x00\x01\x00")
    vectors.append(
        Vector(
            "y_minor_version_1_reserved",
            "accept",
            ("HDR-5", "VER-1"),
            "version 2.1 with a reserved byte set: a reader of spec 2.1 implements file format "
            "2.0, its own minor version is 0, so 2.1's reserved bytes are ignored",
            minor_1.refresh().bytes(),
            expected,
        )
    )
    return vectors + lone_rank_record_vectors()


def lone_rank_record_vectors() -> list[Vector]:
    """A file read on its own whose metadata holds ``awq2_rank``: accepted, the key given as
    stored, whatever it holds [SET-16]."""
    malformed = rank_content(1, 2, recorded={"awq2_rank": {"rank": "1"}})
    return [
        _accept("y_lone_file_rank_record", ("SET-16",), "rank 1's member of a rank set for 2 "
                "ranks, read on its own (not through a manifest): its awq2_rank is not checked",
                rank_content(1, 2)),
        _accept("y_lone_file_rank_record_malformed", ("SET-16",), 'a file read on its own '
                'whose awq2_rank is {"rank": "1"}, a record a set would refuse: not checked',
                malformed),
    ]  # fmt: skip


def _empty_payloads_anywhere() -> Vector:
    """Empty payloads moved off the writer's positions to offsets SLAB-7 allows: a boundary
    inside another payload's bytes, and ``index_offset`` itself.  Same content as written."""
    rng = np.random.default_rng(5)
    content = Content(
        dense=[
            ("big", rng.standard_normal((300, 200)).astype(np.float32), None),  # 4 blocks
            ("inside", np.zeros((0, 3), np.float16), None),
            ("at_index", np.zeros(0, np.uint8), None),
        ]
    )
    data, expected = build(content)
    ed = FileEditor(data)
    big = int(ed.entries()[ed.entry_of("big")]["data_offset"])
    ed.set_entry(ed.entry_of("inside"), data_offset=big + 2 * 65536)
    ed.set_entry(ed.entry_of("at_index"), data_offset=ed.index_offset).refresh()
    return Vector(
        "y_empty_payload_anywhere",
        "accept",
        ("SLAB-7", "SLAB-2", "SLAB-3"),
        "empty payloads inside another payload's span and at index_offset",
        ed.bytes(),
        expected,
    )


def either_vectors() -> list[Vector]:
    """Only 8-bit Marlin is optional [LAY-9]: accept with values, or refuse the layout."""
    out = []
    for g in (-1, 128):
        data, expected = build(_marlin(8, g))
        out.append(
            Vector(
                f"i_marlin_8bit_{_group_label(g)}",
                "either",
                ("LAY-9", "LAY-5"),
                f"8-bit Marlin, group size {g}: optional for readers",
                data,
                expected,
                either_codes=("UNSUPPORTED_LAYOUT",),
            )
        )
    return out


def reject_vectors() -> list[Vector]:
    """One ``n_`` vector per mutation of the catalogue, then one per input the fuzzer found
    crashing the reference reader (``n_fuzz_*``, :data:`tools.vectors.fuzz_findings.FUZZ_FINDINGS`),
    so that every such crash stays a must-reject case for every loader."""
    bases = {name: base_bytes(name) for name in BASES}
    stage = {"open": ("RD-1",), "validate": ("RD-2",), "verify": ("ENT-10",)}
    return [
        Vector(
            f"n_{m.id}",
            "reject",
            tuple(dict.fromkeys((*m.requirements, *stage[m.level], "RD-3"))),
            # the committed manifest's words, kept: the fuzzer was bench/fuzz.py then
            m.description + (" (found by bench/fuzz.py)" if m in FUZZ_FINDINGS else ""),
            mutated(m, bases[m.base]),
            error_code=m.code,
            level=m.level,
        )
        for m in (*MUTATIONS, *FUZZ_FINDINGS)
    ]


def all_vectors() -> list[Vector]:
    return [*accept_vectors(), *reject_vectors(), *either_vectors(), *set_vectors()]


# ------------------------------------------------------------------------------ output


def manifest(vectors: list[Vector]) -> dict[str, Any]:
    entries = []
    for v in vectors:
        entry: dict[str, Any] = {"id": v.id}
        if v.folder_files is None:
            entry |= {"file": f"vectors/{v.id}.awq2", "sha256": sha256(v.data), "size": len(v.data)}
        else:  # a file set: the folder, and every file in it
            entry["folder"] = f"vectors/{v.id}"
            entry["folder_files"] = [
                {"name": name, "size": len(data), "sha256": sha256(data)}
                for name, data in sorted(v.folder_files.items())
            ]
        entry |= {
            "expect": v.expect,
            "requirements": list(v.requirements),
            "description": v.description,
        }
        if v.error_code:
            entry["error_code"] = v.error_code
            entry["check_level"] = v.level
        if v.either_codes:
            entry["either_codes"] = list(v.either_codes)
        if v.content is not None:
            entry["content"] = v.content
        entries.append(entry)
    return {
        "manifest_version": MANIFEST_VERSION,
        "suite_version": SUITE_VERSION,
        "spec_version": SPEC_VERSION,
        "files": [
            {"path": path, "size": len(data), "sha256": sha256(data)}
            for path, data in schema_files().items()
        ],
        "vectors": entries,
    }


def schema_files() -> dict[str, bytes]:
    """The suite's files besides the vectors and the manifest: the JSON Schemas, as committed
    (written by hand, not generated)."""
    return {f"schema/{p.name}": p.read_bytes() for p in sorted(SCHEMAS.glob("*.json"))}


def files(vectors: list[Vector]) -> dict[str, bytes]:
    """The generated files of the suite, by their path under the output folder, with their
    bytes: one ``vectors/<id>.awq2`` per vector (a set: ``vectors/<id>/<name>`` per file of its
    folder), then ``manifest.json``."""
    out: dict[str, bytes] = {}
    for v in vectors:
        if v.folder_files is None:
            out[f"vectors/{v.id}.awq2"] = v.data
        else:
            out |= {f"vectors/{v.id}/{name}": data for name, data in v.folder_files.items()}
    text = exactjson.dumps(manifest(vectors), indent=1) + "\n"
    out["manifest.json"] = text.encode("utf-8")
    return out


def suite_files(vectors: list[Vector]) -> dict[str, bytes]:
    """Every file of the suite as published (the archive's members): the generated ones and
    the schemas, sorted by path."""
    return dict(sorted({**files(vectors), **schema_files()}.items()))


def write_all(out: Path) -> dict[str, Any]:
    vectors = all_vectors()
    (out / "vectors").mkdir(parents=True, exist_ok=True)
    generated = files(vectors)
    for stale in (out / "vectors").glob("**/*"):
        if stale.is_file() and stale.relative_to(out).as_posix() not in generated:
            stale.unlink()
    for stale in (out / "vectors").iterdir():
        if stale.is_dir() and not any(stale.iterdir()):
            stale.rmdir()
    for name, data in generated.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(data)
    return manifest(vectors)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.vectors.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=HERE, help="folder for vectors/ and manifest.json"
    )
    parser.add_argument(
        "--record-release",
        action="store_true",
        help="record the digest of the suite's files for SUITE_VERSION in "
        "tools/vectors/releases.json (after bumping SUITE_VERSION), instead of writing",
    )
    parser.add_argument(
        "--amend",
        action="store_true",
        help="with --record-release: replace the digest already recorded for SUITE_VERSION "
        "(only for a version not yet published)",
    )
    args = parser.parse_args(argv)
    if args.record_release:
        return releases.record(SUITE_VERSION, suite_files(all_vectors()), amend=args.amend)
    doc = write_all(args.out)
    counts: dict[str, int] = {}
    for v in doc["vectors"]:
        counts[v["expect"]] = counts.get(v["expect"], 0) + 1
    print(
        f"wrote {len(doc['vectors'])} vectors to {args.out}: "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
