"""Mutators of the JSON files of an AWQ v1 checkpoint: ``config.json``, ``quant_config.json``,
``model.safetensors.index.json`` and the JSON header of a safetensors shard.

Structure-aware edits put a hostile *text* fragment at one place of the parsed document (the
document itself, ``quantization_config``, ``weight_map``, one of its values, one field), so
that values no JSON library writes can be had: NaN, Infinity, 1e400, -0, 201-digit integers,
1e-400; lone surrogate escapes, raw control characters, invalid UTF-8, a byte order mark;
nesting far past the metadata's depth limit (up to 100,000 levels, made as text, so nothing
here recurses); a member over 16 MiB (rarely, to keep inputs small on average); duplicate keys;
wrong types at every level; and, for ``weight_map``, file names that leave the folder or are
not plain names (``../x``, absolute paths, ``.``, ``..``, empty, NUL, ``/``), that name another
file of the folder, a missing one, or 300 bytes.  Byte-level edits (bit flips, truncations,
insertions, deletions) of the JSON text complete them.  Each step names the file it edited.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from typing import Any

from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH

CONFIG = "config.json"
QUANT_CONFIG = "quant_config.json"
INDEX = "model.safetensors.index.json"
JSON_FILES = (CONFIG, QUANT_CONFIG, INDEX)

#: Stands for the fragment in the document until it is serialised (json.dumps escapes NUL).
_MARK = "\x00fuzz-fragment\x00"
_MARK_TEXT = json.dumps(_MARK).encode()

Path_ = tuple[str, ...]

# --------------------------------------------------------------------------- fragments

_TYPES = (
    b"[]", b"[1, 2]", b'"x"', b'""', b"0", b"1", b"-1", b"4", b"null", b"true", b"false",
    b"{}", b'{"a": {"b": [null]}}', b"[[[[]]]]", b'[{"a": 1}]', b"1.5", b'["model.safetensors"]',
    b'{"": ""}', b'[null, "x", {}]',
)  # fmt: skip

_NUMBERS = (
    b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"-0", b"-0.0",
    b"1" + b"0" * 200, b"-" + b"9" * 201, b"9" * 4301, b"4.0", b"4e0", b"0x4", b"04", b"+4",
    b".5", b"1e", b"-", b"18446744073709551616", b"9223372036854775808", b"-9223372036854775809",
    b"1E+2", b"4.000000000000000000000000000001",
)  # fmt: skip

_STRINGS = (
    b'"\\ud800"', b'"\\udc00"', b'"a\\ud800b"', b'"\\ud800\\u0041"', b'"\\udbff\\udfff"',
    b'"a\\u0000b"', b'"\x01"', b'"\n"', b'"\t"', b'"\x7f"', b'"\xff\xfe"', b'"\xc3"',
    b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xef\xbb\xbf"', b'"\xf4\x90\x80\x80"', b'"\\x41"',
    b'"\\u12"', b'"\\', b'"unterminated', b"'single'", b'"gemm\\u0000"', b'"GEMM"',
    b'"\\u0067emm"', b'"awq\xff"',
)  # fmt: skip

#: File names for ``weight_map`` values; the folder's own files are added at the time.
_FILE_NAMES = (
    "../x.safetensors", "../model.safetensors", "/etc/hostname", "/dev/zero", "/proc/self/mem",
    "/dev/shm/model.safetensors", "/model.safetensors", "//model.safetensors", ".", "..", "",
    "model\x00.safetensors", "\x00", "sub/model.safetensors", "model.safetensors/",
    "./model.safetensors",
    "..\\x.safetensors", "C:\\model.safetensors", "model-00009-of-00009.safetensors",
    "a" * 288 + ".safetensors", "a" * 255, "a" * 256, " model.safetensors", "model.safetensors\n",
    "MODEL.SAFETENSORS", "\u00e9.safetensors", "\ufeffmodel.safetensors",
)  # fmt: skip

#: Raw-text file names (not expressible as a Python str dumped by json).
_RAW_FILE_NAMES = (b'"\\ud800.safetensors"', b'"\xff.safetensors"', b'"model\\u002fx"')

#: The fields to aim at in each kind of file, besides those present.
_FIELDS: dict[str, tuple[str, ...]] = {
    CONFIG: ("hidden_size", "torch_dtype", "architectures", "quantization_config"),
    "quantization_config": ("bits", "group_size", "zero_point", "version", "quant_method",
                            "modules_to_not_convert"),
    QUANT_CONFIG: ("w_bit", "q_group_size", "zero_point", "version", "quant_method", "bits",
                   "group_size", "modules_to_not_convert"),
    INDEX: ("metadata", "weight_map"),
    "safetensors": ("__metadata__",),
}  # fmt: skip


def _deep(rng: random.Random) -> bytes:
    """Nesting around the limit or far past it, as text (up to 100,000 levels)."""
    d = rng.choice((MAX_METADATA_DEPTH - 1, MAX_METADATA_DEPTH, MAX_METADATA_DEPTH + 1,
                    100, 1000, 10_000, 100_000))  # fmt: skip
    style = rng.randrange(5)
    if style == 0:
        return b"[" * d + b"]" * d
    if style == 1:
        return b'{"a":' * d + b"1" + b"}" * d
    if style == 2:
        return b"[" * d  # never closed
    if style == 3:
        return b'[{"a":' * (d // 2) + b"null" + b"}]" * (d // 2)
    return b"[" * d + b'"]]]]"' + b"]" * (d - 1)  # brackets in a string do not count


def _big(rng: random.Random) -> bytes:
    """A large member: usually 64 KiB, rarely one past the metadata's 16 MiB limit."""
    n = rng.choices((1 << 16, 1 << 20, MAX_METADATA_LENGTH + 1), (80, 18, 2))[0]
    if rng.random() < 0.7:
        return b'"' + b"a" * n + b'"'
    return b"[" + b"0," * (n // 2) + b"0]"


def _dup(rng: random.Random, value: Any) -> bytes:
    """The object again with one of its keys repeated (same or other value), or a pair of
    duplicate keys in a fresh one."""
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        other: Any = rng.choice((value[key], None, 8, "x", {}, [value[key]]))
        pair = json.dumps(key).encode() + b": " + json.dumps(other).encode()
        return json.dumps(value).encode()[:-1] + b", " + pair + b"}"
    return b'{"a": 1, "a": 2}'


def fragment(rng: random.Random, value: Any) -> tuple[bytes, str]:
    """A hostile text fragment to stand where ``value`` was, and what it is."""
    kinds = ("type", "deep", "big", "number", "string", "dup")
    kind = rng.choices(kinds, (30, 12, 3, 25, 20, 10))[0]
    if kind == "deep":
        raw = _deep(rng)
        return raw, f"{len(raw)} bytes of nesting ({raw[:8]!r}...)"
    if kind == "big":
        raw = _big(rng)
        return raw, f"a {len(raw)}-byte value ({raw[:4]!r}...)"
    if kind == "dup":
        raw = _dup(rng, value)
        return raw, f"duplicate keys {_short(raw)}"
    raw = rng.choice({"type": _TYPES, "number": _NUMBERS, "string": _STRINGS}[kind])
    return raw, _short(raw)


def _short(raw: bytes) -> str:
    return repr(raw) if len(raw) <= 60 else f"{raw[:40]!r}... ({len(raw)} bytes)"


# --------------------------------------------------------------------------- documents


def parse(raw: bytes) -> Any:
    """The document (Python's lenient reading: NaN and duplicate keys pass), or None when
    it cannot be read (then only byte-level edits apply)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def render(doc: Any, path: Path_, raw: bytes, rng: random.Random) -> bytes | None:
    """``doc`` as text with ``raw`` standing at ``path`` (made of objects where it is not);
    None when the document cannot be written back (too deep for json.dumps)."""
    if not path:
        return raw
    root = dict(doc) if isinstance(doc, dict) else {}
    node = root
    for key in path[:-1]:
        child = node.get(key)
        node[key] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    node[path[-1]] = _MARK
    try:
        text = json.dumps(root, indent=rng.choice((None, 2))).encode()
    except (ValueError, RecursionError):
        return None
    return text.replace(_MARK_TEXT, raw, 1)


def paths(kind: str, doc: Any, rng: random.Random) -> list[Path_]:
    """The places to aim at in one document: itself, each field the kind reads, and (for the
    shard index and the safetensors header) a few members of the tensor maps."""
    out: list[Path_] = [()]
    top = doc if isinstance(doc, dict) else {}
    fields = set(_FIELDS.get(kind, ())) | (set(top) if kind != "safetensors" else set())
    out += [(k,) for k in sorted(fields)]
    if kind == CONFIG:
        q = top.get("quantization_config")
        qf = set(_FIELDS["quantization_config"]) | (set(q) if isinstance(q, dict) else set())
        out += [("quantization_config", k) for k in sorted(qf)] * 2
    elif kind == INDEX:
        wm = top.get("weight_map")
        names = sorted(wm) if isinstance(wm, dict) else []
        out += [("weight_map", n) for n in rng.sample(names, min(3, len(names)))]
        out += [("metadata", "total_size")]
    elif kind == "safetensors":
        names = sorted(k for k in top if k != "__metadata__")
        for n in rng.sample(names, min(2, len(names))):
            out += [(n,), (n, "dtype"), (n, "shape"), (n, "data_offsets")]
        out += [("__metadata__", "format")]
    return out


def _path_text(path: Path_) -> str:
    return ".".join(path) if path else "(document)"


def structured(rng: random.Random, kind: str, raw: bytes, folder: list[str]) -> tuple[bytes, str]:
    """One structure-aware edit of the JSON text ``raw`` of a file of ``kind``; ``folder``
    names the files beside it (for ``weight_map`` names). Returns the new text and the step."""
    doc = parse(raw)
    how = rng.randrange(10)
    if how == 0:  # the document as a whole: a BOM, trailing text, another encoding
        return _whole(rng, raw)
    if kind == INDEX and how <= 3 and isinstance(doc, dict):
        done = _weight_map(rng, doc, folder)
        if done is not None:
            return done
    if doc is None:
        return bytes_edit(rng, raw)
    path = rng.choice(paths(kind, doc, rng))
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    frag, what = fragment(rng, value)
    text = render(doc, path, frag, rng)
    if text is None:
        return bytes_edit(rng, raw)
    return text, f"{_path_text(path)} = {what}"


def _whole(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    how = rng.randrange(7)
    if how == 0:
        return b"\xef\xbb\xbf" + raw, "a BOM before the document"
    if how == 1:
        return raw + rng.choice((b" {}", b"\x00", b",", b"]", b"\n\n")), "text after the document"
    if how == 2:
        try:
            return raw.decode("utf-8").encode("utf-16"), "the document in UTF-16"
        except UnicodeDecodeError:
            return b"\xff\xfe" + raw, "a UTF-16 BOM before the document"
    if how == 3:
        return b"", "empty"
    if how == 4:
        return b" " * rng.choice((1, 4096, 1 << 20)) + raw, "whitespace before the document"
    if how == 5:
        return raw + raw, "the document twice"
    return b"\x00" * len(raw), "zeroed"


def _weight_map(
    rng: random.Random, doc: dict[str, Any], folder: list[str]
) -> tuple[bytes, str] | None:
    """``weight_map`` values: paths out of the folder, names that are not plain file names,
    the folder's other files, a missing file, a 300-byte name; one value or all of them;
    or keys that are no tensor's."""
    wm = doc.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        return None
    wm = dict(wm)
    names = sorted(wm)
    how = rng.randrange(6)
    if how <= 2:
        file = rng.choice(_FILE_NAMES + tuple(folder))
        targets = names if how == 0 else [rng.choice(names)]
        for n in targets:
            wm[n] = file
        which = "every value" if how == 0 else f"[{targets[0]!r}]"
        step = f"weight_map {which} = {_short(file.encode('utf-8', 'surrogatepass'))}"
    elif how == 3:  # a raw (non-str-expressible) name
        raw = rng.choice(_RAW_FILE_NAMES)
        n = rng.choice(names)
        text = render(doc, ("weight_map", n), raw, rng)
        return (text, f"weight_map[{n!r}] = {raw!r}") if text is not None else None
    elif how == 4:  # a tensor moved to another shard, or listed twice
        n = rng.choice(names)
        shards = sorted(
            {v for v in wm.values() if isinstance(v, str)}
            | {f for f in folder if f.endswith(".safetensors")}
        )
        wm[n] = rng.choice(shards)
        step = f"weight_map[{n!r}] = {wm[n]!r}"
    else:  # keys: an absent tensor, an empty name, one removed
        n = rng.choice(names)
        new = rng.choice(("", "absent.tensor", n + ".x", "\x00", None))
        value = wm.pop(n)
        if new is not None:
            wm[new] = value
        step = f"weight_map key {n!r} -> {new!r}"
    out = dict(doc, weight_map=wm)
    return json.dumps(out, indent=rng.choice((None, 2))).encode(), step


# --------------------------------------------------------------------------- bytes


def bytes_edit(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    """A byte-level edit of JSON text: bit flips, a truncation, an insertion, a deletion."""
    data = bytearray(raw)
    how = rng.randrange(5)
    if not data or how == 0:
        at = rng.randrange(len(data) + 1)
        byte = rng.choice((0, 0x22, 0x5C, 0x7B, 0x5B, 0x2C, 0xFF, 0x80, rng.randrange(256)))
        blob = bytes([byte])
        data[at:at] = blob
        return bytes(data), f"insert {blob!r} at {at}"
    if how == 1:
        steps = []
        for _ in range(rng.choice((1, 1, 2, 4))):
            at, bit = rng.randrange(len(data)), rng.randrange(8)
            data[at] ^= 1 << bit
            steps.append(f"{at}.{bit}")
        return bytes(data), f"flip bits {', '.join(steps)}"
    if how == 2:
        cut = rng.choice((len(data) - 1, len(data) // 2, 1, rng.randrange(len(data))))
        return bytes(data[:cut]), f"truncate to {cut}"
    if how == 3:
        at = rng.randrange(len(data))
        n = rng.choice((1, 1, 4, 64))
        del data[at : at + n]
        return bytes(data), f"delete {n} bytes at {at}"
    at = rng.randrange(len(data))
    n = rng.choice((1, 8, 64))
    data[at:at] = data[at : at + n]
    return bytes(data), f"repeat {n} bytes at {at}"


# --------------------------------------------------------------------------- safetensors


Edit = Callable[[random.Random, str, bytes, list[str]], tuple[bytes, str]]


def st_header_edit(rng: random.Random, data: bytes, edit: Edit) -> tuple[bytes, str] | None:
    """Apply a JSON edit to the header of a safetensors file; the length prefix follows."""
    if len(data) < 8:
        return None
    (length,) = struct.unpack_from("<Q", data)
    if length > len(data) - 8:
        return None
    header, rest = data[8 : 8 + length], data[8 + length :]
    new, step = edit(rng, "safetensors", header, [])
    return struct.pack("<Q", len(new)) + new + rest, step
