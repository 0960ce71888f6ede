"""File-set vectors (spec 2.1, docs/spec/sets.md): folders holding a manifest and its members.

A set vector is a folder: ``model.awq2.set.json`` and the files it lists, each member written by
the reference writer from contents drawn here (:func:`tools.vectors.content.build`).  The
manifest is written here, field by field, from the members' bytes (length, ``header_crc`` at
header bytes 124-127, SHA-256), then broken on purpose for the must-reject vectors.

Expected content is each member's expected content (computed from its inputs, as for a file
vector) put together as the adapter protocol describes a set: every tensor and layer of every
member, with ``"rank"`` in a rank set; the first member's metadata; ``"set"`` with the kind
(and ``tp_size``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spec.constants import SET_MANIFEST, SET_RANK_KEY, SET_VERSION
from tools.vectors.content import (
    MIXTRAL_EXPERT_ROLES,
    Content,
    Layer,
    Vector,
    base_bytes,
    build,
    draw_layer,
    expert_layers,
    mutated,
)
from tools.vectors.mutations import MUTATIONS


@dataclass(frozen=True)
class Member:
    """One file of a set vector: its name, bytes, rank (rank sets) and expected content."""

    name: str
    data: bytes
    expected: dict[str, Any]
    rank: int | None = None


def member(name: str, content: Content, rank: int | None = None) -> Member:
    data, expected = build(content)
    return Member(name, data, expected, rank)


def header_crc(data: bytes) -> str:
    """The member's ``header_crc``, header bytes 124 to 127 (little-endian), as the manifest
    writes it: 8 lowercase hex digits [SET-2]."""
    return f"{int.from_bytes(data[124:128], 'little'):08x}"


def file_object(m: Member) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": m.name,
        "size": len(m.data),
        "header_crc": header_crc(m.data),
        "sha256": hashlib.sha256(m.data).hexdigest(),
    }
    if m.rank is not None:
        obj["rank"] = m.rank
    return obj


def manifest_doc(members: list[Member], tp_size: int | None = None) -> dict[str, Any]:
    """The manifest of ``members`` as a writer writes it [SET-2]: a rank set when ``tp_size``
    is given."""
    doc: dict[str, Any] = {"awq2_set": SET_VERSION, "kind": "split" if tp_size is None else "rank"}
    if tp_size is not None:
        doc["tp_size"] = tp_size
    doc["files"] = [file_object(m) for m in members]
    return doc


def dumps(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")


def expected_set(members: list[Member], tp_size: int | None = None) -> dict[str, Any]:
    """The accept document of the set: every member's tensors and layers (with ``rank`` in a
    rank set), the first member's metadata [SET-10], and the kind."""
    tensors: list[dict[str, Any]] = []
    layers: list[dict[str, Any]] = []
    for m in members:
        tag = {} if tp_size is None else {"rank": m.rank}
        tensors += [{**t, **tag} for t in m.expected["tensors"]]
        layers += [{**layer, **tag} for layer in m.expected["layers"]]
    kind: dict[str, Any] = {"kind": "split"}
    if tp_size is not None:
        kind = {"kind": "rank", "tp_size": tp_size}
    tensors.sort(key=lambda t: (t.get("rank", 0), t["name"]))
    return {
        "set": kind,
        "tensors": tensors,
        "layers": layers,
        "metadata": members[0].expected["metadata"],
    }


# ------------------------------------------------------------------------------ members drawn


def _dense(
    name: str, seed: int, shape: tuple[int, ...] = (16, 8)
) -> tuple[str, np.ndarray, str | None]:
    rng = np.random.default_rng(seed)
    return (name, rng.standard_normal(shape).astype(np.float16), None)


METADATA = {"config": {"hidden_size": 64}, "note": "conformance set"}


def split_members(count: int = 3, metadata: dict[str, Any] | None = None) -> list[Member]:
    """A small model split over ``count`` members: embeddings, one quantised layer per
    member, norms last."""
    meta = METADATA if metadata is None else metadata
    contents = [
        Content(
            dense=[_dense("model.embed_tokens.weight", 1, (32, 64))] if i == 0 else [],
            layers=[draw_layer(f"model.layers.{i}.mlp.up_proj", 128, 64, 4, 64, 100 + i)],
            metadata=meta,
        )
        for i in range(count)
    ]
    contents[-1].dense.append(("model.norm.weight", np.ones(64, np.float32), None))
    return [member(f"model-{i + 1:05d}-of-{count:05d}.awq2", c) for i, c in enumerate(contents)]


def tiny_members(count: int = 2, metadata: dict[str, Any] | None = None) -> list[Member]:
    """Members of one small tensor each, for the vectors whose point is the manifest or the
    files, not the tensors."""
    meta = METADATA if metadata is None else metadata
    return [
        member(f"model-{i + 1:05d}-of-{count:05d}.awq2",
               Content(dense=[_dense(f"model.layers.{i}.weight", 600 + i)], metadata=meta))
        for i in range(count)
    ]  # fmt: skip


def record(rank: int, tp_size: int, **more: Any) -> dict[str, Any]:
    """What a rank set's member records of itself in its metadata [SET-15]."""
    return {SET_RANK_KEY: {"rank": rank, "tp_size": tp_size, **more}}


def tiny_ranks(tp_size: int = 2) -> list[Member]:
    """One small tensor per rank, the same name and shape in every rank."""
    return [
        member(f"model-tp{tp_size}-rank{r}.awq2",
               Content(dense=[_dense("model.norm.weight", 700 + r, (64,))],
                       metadata=record(r, tp_size)), r)
        for r in range(tp_size)
    ]  # fmt: skip


def rank_content(rank: int, tp_size: int, n: int = 64, *, extra: str = "",
                 recorded: dict[str, Any] | None = None) -> Content:  # fmt: skip
    """Rank ``rank``'s file of a small model cut for ``tp_size`` ranks: every rank the same
    names and fields [SET-7], its own values, and its own record [SET-15] (``recorded``
    instead, when given; ``{}``: none)."""
    layers = [
        draw_layer("model.layers.0.mlp.up_proj", 128, n, 4, 64, 200 + rank),
        draw_layer("model.layers.0.mlp.down_proj", 128, 64, 4, 64, 300 + rank),
    ]
    dense = [_dense("model.embed_tokens.weight", 400 + rank, (32 // tp_size, 64))]
    dense.append(("model.norm.weight", np.ones(64, np.float32), None))
    if extra:
        dense.append(_dense(extra, 500 + rank, (4,)))
    meta = {"tensor_parallel": {"tp_size": tp_size}}
    meta |= record(rank, tp_size) if recorded is None else recorded
    return Content(dense=dense, layers=layers, metadata=meta)


def rank_members(tp_size: int = 2) -> list[Member]:
    return [
        member(f"model-tp{tp_size}-rank{r}.awq2", rank_content(r, tp_size), r)
        for r in range(tp_size)
    ]


def rank_split_members() -> list[Member]:
    """Two ranks, each split over two members (a rank's own split set), listed rank 1 first:
    ranks come from ``rank``, never from the order."""
    out = []
    for r in (1, 0):
        whole = rank_content(r, 2)
        first = Content(dense=whole.dense[:1], layers=whole.layers[:1], metadata=whole.metadata)
        second = Content(dense=whole.dense[1:], layers=whole.layers[1:], metadata=whole.metadata)
        out += [
            member(f"model-tp2-rank{r}-00001-of-00002.awq2", first, r),
            member(f"model-tp2-rank{r}-00002-of-00002.awq2", second, r),
        ]
    return out


#: The expert set the MoE rank-set vector cuts [LAY-12]: Mixtral's original names, the
#: smallest sizes whose pieces are Marlin layers on both ranks (gate and up ``n``, down ``k``
#: halved to 128).
MOE_EXPERTS = "model.layers.0.block_sparse_moe.experts"
MOE_COUNT, MOE_HIDDEN, MOE_INTERMEDIATE = 2, 128, 256


def whole_experts() -> list[Layer]:
    """The whole experts of the MoE rank-set vector, before any cut."""
    return expert_layers(MOE_EXPERTS, MIXTRAL_EXPERT_ROLES, MOE_COUNT, MOE_HIDDEN,
                         MOE_INTERMEDIATE, seed=40)  # fmt: skip


def expert_piece(layer: Layer, rank: int, tp_size: int) -> Layer:
    """Rank ``rank``'s piece of one expert projection, cut from its codes, zero points and
    scales as they are drawn (not from a stored layer): gate and up (``w1``, ``w3``) by
    output columns, down (``w2``) by input rows and their groups [LAY-12, SET-11]."""
    k, n = layer.q.shape
    if layer.prefix.endswith(".w2"):
        rows, groups = k // tp_size, k // tp_size // layer.group_size
        cut = (slice(rank * rows, (rank + 1) * rows), slice(None))
        group_cut = (slice(rank * groups, (rank + 1) * groups), slice(None))
    else:
        cols = n // tp_size
        cut = group_cut = (slice(None), slice(rank * cols, (rank + 1) * cols))
    return replace(layer, q=layer.q[cut], z=layer.z[group_cut], s=layer.s[group_cut])


def expert_rank_members(tp_size: int = 2) -> list[Member]:
    """The MoE expert set cut for ``tp_size`` ranks: each rank's pieces of every expert under
    the experts' own names, and its record [SET-15]."""
    whole = whole_experts()
    return [
        member(f"model-tp{tp_size}-rank{r}.awq2",
               Content(layers=[expert_piece(layer, r, tp_size) for layer in whole],
                       metadata={"tensor_parallel": {"tp_size": tp_size}} | record(r, tp_size)),
               r)
        for r in range(tp_size)
    ]  # fmt: skip


# ------------------------------------------------------------------------------ vectors


def folder(members: list[Member], manifest: bytes | None, **extra: bytes) -> dict[str, bytes]:
    """The vector's folder: the members, the manifest (None: none), other files."""
    files = {m.name: m.data for m in members}
    if manifest is not None:
        files[SET_MANIFEST] = manifest
    return {**files, **extra}


def accept(vid: str, reqs: tuple[str, ...], description: str, members: list[Member],
           tp_size: int | None = None, manifest: bytes | None = None,
           extra: dict[str, bytes] | None = None) -> Vector:  # fmt: skip
    text = manifest if manifest is not None else dumps(manifest_doc(members, tp_size))
    return Vector(
        vid,
        "accept",
        reqs,
        description,
        b"",
        expected_set(members, tp_size),
        folder_files=folder(members, text, **(extra or {})),
    )


#: The check a reject vector's error must come from, and the requirements of that stage.
STAGES = {"open": ("SET-5",), "validate": ("SET-8",), "verify": ("SET-8", "ENT-10")}


def reject(vid: str, code: str, reqs: tuple[str, ...], level: str, description: str,
           files: dict[str, bytes]) -> Vector:  # fmt: skip
    requirements = tuple(dict.fromkeys((*reqs, *STAGES[level], "RD-3")))
    return Vector(
        vid, "reject", requirements, description, b"", error_code=code, level=level,
        folder_files=files,
    )  # fmt: skip


def with_manifest(members: list[Member], edit: Callable[[dict[str, Any]], Any],
                  tp_size: int | None = None) -> dict[str, bytes]:  # fmt: skip
    """The folder of ``members`` with the manifest changed by ``edit`` (in place)."""
    doc = manifest_doc(members, tp_size)
    edit(doc)
    return folder(members, dumps(doc))


def accept_vectors() -> list[Vector]:
    split = split_members()
    ranks = rank_members()
    unknown = manifest_doc(split)
    unknown["generator"] = {"name": "a future writer", "version": [3, 1]}
    for obj in unknown["files"]:
        obj["parts"] = 1
    split_with_rank_fields = manifest_doc(split)
    split_with_rank_fields["tp_size"] = "two"
    split_with_rank_fields["files"][0]["rank"] = -1
    recorded = [
        member(f"model-tp2-rank{r}.awq2",
               rank_content(r, 2, recorded=record(r, 2, writer="a future one", shard=[r, 2])), r)
        for r in range(2)
    ]  # fmt: skip
    first_differs = split_members(2)
    first_differs[1] = member(
        first_differs[1].name,
        Content(
            layers=[draw_layer("model.layers.1.mlp.up_proj", 128, 64, 4, 64, 101)],
            dense=[("model.norm.weight", np.ones(64, np.float32), None)],
            metadata={"note": "another member's metadata"},
        ),
    )
    # rank 1's metadata differs from rank 0's beyond awq2_rank: SET-14's comparison is no check
    # of SET-8, so the set is accepted with the first member's metadata [ADP-5]
    rank1_differs = replace(
        rank_content(1, 2),
        metadata={"tensor_parallel": {"tp_size": 2}, "note": "rank 1's own note"} | record(1, 2),
    )
    metadata_differs = [ranks[0], member(ranks[1].name, rank1_differs, 1)]
    return [
        accept("y_set_split", ("SET-1", "SET-5", "SET-6", "SET-8"),
               "a split set of three members: one layer in each, names found in any member",
               split),
        accept("y_set_one_member", ("SET-1", "SET-2"), "a split set of a single member",
               split_members(1)),
        accept("y_set_unknown_members", ("SET-2", "SET-1"),
               "members the manifest schema does not know, at the top and in every file object, "
               "and other files in the folder (config.json, tokenizer.json): all ignored",
               split, manifest=dumps(unknown), extra={"config.json": b'{"model_type": "llama"}\n',
               "tokenizer.json": b"{}\n"}),
        accept("y_set_metadata_first_member", ("SET-10",),
               "members with different metadata: the set's metadata is the first member's",
               first_differs),
        accept("y_set_rank_tp2", ("SET-7", "SET-5", "SET-8"),
               "a rank set for 2 ranks, one file each: the same names and fields, each rank "
               "its own values", ranks, tp_size=2),
        accept("y_set_rank_split_members", ("SET-6", "SET-7"),
               "a rank set whose ranks are each split over two members, rank 1 listed first",
               rank_split_members(), tp_size=2),
        accept("y_set_rank_tp1", ("SET-2", "SET-7"), "a rank set for a single rank",
               rank_members(1), tp_size=1),
        accept("y_set_rank_record_more_members", ("SET-15",),
               "each member records its rank and tp_size with other members beside them in its "
               "awq2_rank object: ignored", recorded, tp_size=2),
        accept("y_set_rank_metadata_differs", ("SET-8", "SET-14", "ADP-5"),
               "a rank set whose rank 1 holds a metadata key rank 0 lacks: full validation does "
               "not compare the members' metadata, and the document gives the first member's, "
               "its awq2_rank included", metadata_differs, tp_size=2),
        accept("y_set_rank_minus_zero", ("SET-2",),
               "rank 0 written -0 in the manifest: the integer 0", ranks, tp_size=2,
               manifest=dumps(manifest_doc(ranks, 2)).replace(b'"rank": 0', b'"rank": -0', 1)),
        accept("y_set_split_ignores_rank_fields", ("SET-2",),
               "a split set whose manifest has tp_size \"two\" and a rank -1 in a file object: "
               "members a split set does not know, ignored", split,
               manifest=dumps(split_with_rank_fields)),
        accept("y_set_other_case_suffix", ("SET-8",),
               "a file MODEL-00004.AWQ2 in the folder, not listed: its name does not end in the "
               "bytes .awq2, so it is no stray member", split,
               extra={"MODEL-00004.AWQ2": split[0].data}),
        accept("y_set_rank_moe_experts", ("LAY-12", "SET-11", "SET-7"),
               "Mixtral's experts 0 and 1 (w1, w3, w2; hidden size 128, intermediate 256) cut "
               "for 2 ranks as a dense MLP is: rank r holds the r-th column half of every "
               "w1 and w3 and the r-th row half of every w2, under the same names",
               expert_rank_members(), tp_size=2),
    ]  # fmt: skip


def _version_2_without_files(doc: dict[str, Any]) -> None:
    doc["awq2_set"] = 2
    del doc["files"]


def _manifest_rejects() -> list[Vector]:
    """SET-2 to SET-4: the manifest itself; nothing but the manifest need be read."""
    split, ranks = tiny_members(), tiny_ranks()

    def bad(vid: str, description: str, edit: Callable[[dict[str, Any]], Any],
            code: str = "SET_BAD_MANIFEST", reqs: tuple[str, ...] = ("SET-2",),
            tp: bool = False) -> Vector:  # fmt: skip
        files = with_manifest(ranks if tp else split, edit, 2 if tp else None)
        return reject(vid, code, reqs, "open", description, files)

    def first(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc["files"][0].__setitem__(key, value)

    raw = {
        "n_set_manifest_not_json": b'{"awq2_set": 1, "kind": "split", "files": [',
        "n_set_manifest_not_object": b"[1]\n",
        "n_set_manifest_not_utf8": b'{"awq2_set": 1, "kind": "split\xff", "files": []}\n',
    }
    out = [
        reject(vid, "SET_BAD_MANIFEST", ("SET-2",), "open", f"the manifest: {what}",
               folder(split, raw[vid]))
        for vid, what in (
            ("n_set_manifest_not_json", "truncated JSON"),
            ("n_set_manifest_not_object", "a JSON array, not an object"),
            ("n_set_manifest_not_utf8", "a byte that is not UTF-8 (META-1)"),
        )
    ]  # fmt: skip
    out += [
        bad("n_set_files_empty", "an empty files array", lambda d: d.__setitem__("files", [])),
        bad("n_set_files_missing", "no files member", lambda d: d.pop("files")),
        bad("n_set_size_not_integer", "a size written as 100000.0, not an integer",
            first("size", 1.0e5)),
        bad("n_set_size_negative", "a negative size", first("size", -1)),
        bad("n_set_header_crc_uppercase", "header_crc in uppercase hex digits",
            lambda d: d["files"][0].__setitem__("header_crc", _upper(d["files"][0]))),
        bad("n_set_sha256_short", "a sha256 of 63 digits",
            lambda d: d["files"][0].__setitem__("sha256", d["files"][0]["sha256"][:63])),
        bad("n_set_name_not_string", "a name that is a number", first("name", 1)),
        bad("n_set_name_traversal", "a name leading out of the folder (../)",
            first("name", "../model-00001-of-00002.awq2"), reqs=("SET-4",)),
        bad("n_set_name_slash", "a name with a /", first("name", "sub/model.awq2"),
            reqs=("SET-4",)),
        bad("n_set_name_backslash", "a name with a backslash",
            first("name", "sub\\model.awq2"), reqs=("SET-4",)),
        bad("n_set_name_nul", "a name with a NUL character",
            first("name", "model\u0000.awq2"), reqs=("SET-4",)),
        bad("n_set_name_leading_dot", "a name starting with .", first("name", ".model.awq2"),
            reqs=("SET-4",)),
        bad("n_set_name_not_awq2", "a name not ending in .awq2", first("name", "config.json"),
            reqs=("SET-4",)),
        bad("n_set_name_twice", "one name listed twice",
            lambda d: d["files"][1].__setitem__("name", d["files"][0]["name"]), reqs=("SET-4",)),
        bad("n_set_rank_out_of_range", "rank 2 in a set of tp_size 2 (members of another "
            "TP degree)", lambda d: d["files"][1].__setitem__("rank", 2), tp=True),
        bad("n_set_rank_absent", "a file of a rank set without its rank",
            lambda d: d["files"][1].pop("rank"), tp=True),
        bad("n_set_tp_size_zero", "tp_size 0", lambda d: d.__setitem__("tp_size", 0), tp=True),
        bad("n_set_tp_size_absent", "a rank set without tp_size", lambda d: d.pop("tp_size"),
            tp=True),
        bad("n_set_version_2", "awq2_set 2", lambda d: d.__setitem__("awq2_set", 2),
            code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_kind_unknown", 'kind "pipeline"', lambda d: d.__setitem__("kind", "pipeline"),
            code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_version_absent", "no awq2_set member: not 1", lambda d: d.pop("awq2_set"),
            code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_kind_absent", "no kind member: neither \"split\" nor \"rank\"",
            lambda d: d.pop("kind"), code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_version_before_files", "awq2_set 2 and no files: the version is checked "
            "before any other member", _version_2_without_files,
            code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_version_string", 'awq2_set "1", a string: not the integer 1',
            lambda d: d.__setitem__("awq2_set", "1"), code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_version_float", "awq2_set 1.0: a number with a fraction, not the integer 1",
            lambda d: d.__setitem__("awq2_set", 1.0), code="SET_UNSUPPORTED", reqs=("SET-3",)),
        bad("n_set_kind_not_string", 'kind ["split"], not a string',
            lambda d: d.__setitem__("kind", ["split"]), code="SET_UNSUPPORTED",
            reqs=("SET-3",)),
    ]  # fmt: skip
    text = dumps(manifest_doc(split))
    size = str(len(split[0].data)).encode()
    deep = b'{"awq2_set": 2, "deep": ' + b"[" * 65 + b"]" * 65 + b"}\n"
    out += [
        reject("n_set_size_exponent", "SET_BAD_MANIFEST", ("SET-2",), "open",
               f"the first size written {size.decode()}e0: the file's length, but with an "
               "exponent, so not an integer", folder(split, text.replace(
                   b'"size": ' + size, b'"size": ' + size + b"e0", 1))),
        reject("n_set_manifest_too_deep", "SET_BAD_MANIFEST", ("SET-2", "SET-3"), "open",
               "awq2_set 2 and arrays nested 65 deep: the text's checks come first, and a "
               "manifest too deep is SET_BAD_MANIFEST (not LIMIT_METADATA, not SET_UNSUPPORTED)",
               folder(split, deep)),
        reject("n_set_manifest_bad_json_version_2", "SET_BAD_MANIFEST", ("SET-2", "SET-3"),
               "open", "awq2_set 2 in a text that is not JSON (a trailing comma): the JSON is "
               "checked before the version", folder(split, text.replace(
                   b'"awq2_set": 1,', b'"awq2_set": 2,,', 1))),
        reject("n_set_name_too_long", "SET_MISSING_FILE", ("SET-5", "SET-4"), "open",
               "a plain name of 300 bytes, longer than a file system allows (ENAMETOOLONG): "
               "no such file", with_manifest(split, lambda d: d["files"][0].__setitem__(
                   "name", "m" * 295 + ".awq2"))),
    ]  # fmt: skip
    return out


def _upper(obj: dict[str, Any]) -> str:
    """The file's header_crc in uppercase: the same value, as a lenient reader would take it
    (a crc of decimal digits only is given a letter, so that the case shows)."""
    crc = str(obj["header_crc"])
    return (crc if crc.upper() != crc else "a" + crc[1:]).upper()


def _member_rejects() -> list[Vector]:
    """SET-5 to SET-8: the members against the manifest, and against each other."""
    split = tiny_members()
    ranks = rank_members()
    doc = manifest_doc(split)
    listed = dumps(doc)
    # the same content written with another metadata value of the same length: another
    # conversion's file, valid, of the same size, with another header_crc
    other_meta = {**METADATA, "note": "conformance sev"}
    stale = tiny_members(2, other_meta)[1]
    assert len(stale.data) == len(split[1].data) and stale.data != split[1].data
    bad_magic = b"\x89AWX" + split[1].data[4:]
    entry_flags = next(m for m in MUTATIONS if m.id == "entry_flags")
    broken = Member(split[1].name, mutated(entry_flags, base_bytes("sample")), {})
    flipped = bytearray(split[0].data)
    flipped[0x10000] ^= 0x01  # the first payload's first byte
    dup = [
        split[0],
        member(
            split[1].name, Content(dense=[_dense("model.layers.0.weight", 9)], metadata=METADATA)
        ),
    ]
    names_differ = [ranks[0], member(ranks[1].name, rank_content(1, 2, extra="rank1.only"), 1)]
    # cut for 4 ranks, recording rank 1 of 2 (SET-15 passes): SET-7 sees the shapes differ
    mixed = [ranks[0], member(ranks[1].name, rank_content(1, 4, n=16, recorded=record(1, 2)), 1)]
    tiny = tiny_ranks()
    dup_rank = [
        tiny[0],
        member("model-tp2-rank0-extra.awq2", Content(dense=[_dense("model.norm.weight", 5, (64,))],
               metadata=record(0, 2)), 0),
        tiny[1],
    ]  # fmt: skip
    wrong_sha = manifest_doc(split)
    wrong_sha["files"][1]["sha256"] = hashlib.sha256(b"another file").hexdigest()
    file_order = manifest_doc(split)
    file_order["files"][1]["header_crc"] = split[1].data[124:128].hex()
    assert file_order["files"][1]["header_crc"] != header_crc(split[1].data)
    first_sha = manifest_doc(split)  # member 1's SHA-256 wrong, member 2's payload damaged
    first_sha["files"][0]["sha256"] = hashlib.sha256(b"another file").hexdigest()
    damaged = bytearray(split[1].data)
    damaged[0x10000] ^= 0x01
    by_member = [split[0], replace(split[1], data=bytes(damaged))]
    of_four = rank_members(4)[:2]  # ranks 0 and 1 of a conversion for 4, each recording so
    swapped = manifest_doc(ranks, 2)
    swapped["files"][0]["rank"], swapped["files"][1]["rank"] = 1, 0
    unrecorded = [member(m.name, rank_content(m.rank or 0, 2, recorded={}), m.rank)
                  for m in ranks]  # fmt: skip

    def rank1_records(value: Any) -> dict[str, bytes]:
        """Rank 0's member as written, rank 1's recording ``value`` under awq2_rank."""
        bad = [ranks[0], member(ranks[1].name, rank_content(1, 2, recorded={SET_RANK_KEY: value}),
                                1)]  # fmt: skip
        return folder(bad, dumps(manifest_doc(bad, 2)))

    split_null = tiny_members(1, {**METADATA, SET_RANK_KEY: None})
    return [
        reject("n_set_missing_file", "SET_MISSING_FILE", ("SET-5",), "open",
               "the second listed file is absent", {split[0].name: split[0].data,
                                                     "model.awq2.set.json": listed}),
        reject("n_set_size_mismatch", "SET_FILE_MISMATCH", ("SET-5",), "open",
               "a member one byte longer than the manifest says",
               folder(split, listed) | {split[1].name: split[1].data + b"\0"}),
        reject("n_set_header_crc_mismatch", "SET_FILE_MISMATCH", ("SET-5",), "open",
               "a member of the same size from another conversion: its header_crc is not the "
               "manifest's", folder(split, listed) | {split[1].name: stale.data}),
        reject("n_set_member_bad_magic", "BAD_MAGIC", ("SET-5", "RD-1"), "open",
               "a member whose magic is broken: the member's own code, before its header_crc",
               folder(split, listed) | {split[1].name: bad_magic}),
        reject("n_set_checks_in_manifest_order", "SET_MISSING_FILE", ("SET-5",), "open",
               "the first member absent and the second of the wrong length: the first in "
               "manifest order answers", {split[1].name: split[1].data + b"\0",
                                          "model.awq2.set.json": listed}),
        reject("n_set_rank_missing", "SET_RANK_MISSING", ("SET-5",), "open",
               "tp_size 2 and only rank 0's file", folder(
                   tiny[:1], dumps(manifest_doc(tiny[:1], 2)))),
        reject("n_set_tp_size_huge", "SET_RANK_MISSING", ("SET-5", "SET-2"), "open",
               "tp_size 2**64 with the files of ranks 0 and 1: rank 2 has no file (found "
               "without counting to tp_size)", folder(
                   tiny, dumps(manifest_doc(tiny, 2) | {"tp_size": 2**64}))),
        reject("n_set_member_invalid", "BAD_ENTRY_FIELD", ("SET-8", "RD-2", "ENT-1"), "validate",
               "a member that fails its own full validation (entry flags), and an unlisted "
               ".awq2 file: the member's own code first", folder(
                   [split[0], broken], dumps(manifest_doc([split[0], broken])),
                   **{"model-old.awq2": split[1].data})),
        reject("n_set_extra_file", "SET_EXTRA_FILE", ("SET-8", "SET-1"), "validate",
               "an .awq2 file in the folder that the manifest does not list",
               folder(split, listed, **{"model-00003-of-00003.awq2": split[1].data})),
        reject("n_set_duplicate_name", "SET_DUPLICATE_NAME", ("SET-6",), "validate",
               "one tensor name in two members of a split set", folder(
                   dup, dumps(manifest_doc(dup)))),
        reject("n_set_duplicate_name_in_rank", "SET_DUPLICATE_NAME", ("SET-6",), "validate",
               "one tensor name in two members of rank 0", folder(
                   dup_rank, dumps(manifest_doc(dup_rank, 2)))),
        reject("n_set_rank_names_differ", "SET_RANK_MISMATCH", ("SET-7",), "validate",
               "rank 1 holds a name rank 0 lacks", folder(
                   names_differ, dumps(manifest_doc(names_differ, 2)))),
        reject("n_set_rank_mixed_tp", "SET_RANK_MISMATCH", ("SET-7",), "validate",
               "rank 1's file cut for tp_size 4 in a set for 2: a layer's n and the embedding's "
               "shape differ from rank 0's", folder(mixed, dumps(manifest_doc(mixed, 2)))),
        reject("n_set_member_bad_tensor_checksum", "BAD_TENSOR_CHECKSUM", ("ENT-10",), "verify",
               "a payload byte of the first member flipped: its payload checksum fails before "
               "any SHA-256 is compared", folder(
                   [replace(split[0], data=bytes(flipped)), split[1]], listed)),
        reject("n_set_bad_sha256", "SET_BAD_SHA256", (), "verify",
               "the second member's sha256 in the manifest is another file's",
               folder(split, dumps(wrong_sha))),
        reject("n_set_header_crc_file_order", "SET_FILE_MISMATCH", ("SET-2", "SET-5"), "open",
               "the second member's header_crc written as its four bytes in file order, not "
               "as the u32 value", folder(split, dumps(file_order))),
        reject("n_set_verify_member_by_member", "SET_BAD_SHA256", (), "verify",
               "the first member's sha256 wrong and a payload byte of the second flipped: the "
               "first member's SHA-256 is compared before the second's payloads are read",
               folder(by_member, dumps(first_sha))),
        reject("n_set_rank_tp_size_lie", "SET_WRONG_RANK", ("SET-15",), "validate",
               "tp_size 2 over ranks 0 and 1 of a conversion for 4 ranks (quarter shards, the "
               "same names and fields in both): each member records tp_size 4",
               folder(of_four, dumps(manifest_doc(of_four, 2)))),
        reject("n_set_rank_swapped", "SET_WRONG_RANK", ("SET-15",), "validate",
               "the two files' rank numbers swapped in the manifest: rank 0's file records "
               "rank 0", folder(ranks, dumps(swapped))),
        reject("n_set_rank_unrecorded", "SET_WRONG_RANK", ("SET-15",), "validate",
               "members of a rank set whose metadata records no awq2_rank",
               folder(unrecorded, dumps(manifest_doc(unrecorded, 2)))),
        reject("n_set_rank_record_string", "SET_WRONG_RANK", ("SET-15",), "validate",
               'rank 1\'s member records {"rank": "1", "tp_size": 2}: a string, not an integer',
               rank1_records({"rank": "1", "tp_size": 2})),
        reject("n_set_rank_record_float", "SET_WRONG_RANK", ("SET-15", "SET-2"), "validate",
               'rank 1\'s member records {"rank": 1.0, "tp_size": 2}: 1.0 is no integer '
               "(SET-2), though its value is the rank", rank1_records({"rank": 1.0, "tp_size": 2})),
        reject("n_set_rank_record_no_tp_size", "SET_WRONG_RANK", ("SET-15",), "validate",
               'rank 1\'s member records {"rank": 1}: no tp_size', rank1_records({"rank": 1})),
        reject("n_set_rank_record_null", "SET_WRONG_RANK", ("SET-15",), "validate",
               'rank 1\'s member holds "awq2_rank": null: the key, but no record',
               rank1_records(None)),
        reject("n_set_split_member_rank_null", "SET_WRONG_RANK", ("SET-15",), "validate",
               'a split set whose member holds "awq2_rank": null: the key is there, whatever '
               "its value", folder(split_null, dumps(manifest_doc(split_null)))),
        reject("n_set_split_member_records_rank", "SET_WRONG_RANK", ("SET-15",), "validate",
               "a split set whose one member is rank 0's file of a rank set (it records "
               "awq2_rank): a shard, not the whole model", folder(
                   ranks[:1], dumps(manifest_doc(ranks[:1])))),
    ]  # fmt: skip


def reject_vectors() -> list[Vector]:
    return [*_manifest_rejects(), *_member_rejects()]


def set_vectors() -> list[Vector]:
    return [*accept_vectors(), *reject_vectors()]
