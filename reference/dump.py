"""``python -m reference.dump PATH``: explain what ``reference.open`` opens, valid or not: an
AWQ-v2 file, a model folder holding ``model.awq2``, a file set (its folder or its manifest:
the set, then each member), or a legacy checkpoint (an AWQ v1 or compressed-tensors folder,
or one of its safetensors files).

Exit status:

* 0 the input is valid (and, with ``--verify``, every payload checksum matches; a legacy
  checkpoint has none, so every tensor is read once instead);
* 1 the input is not valid: the error code, offset and message are printed;
* 2 usage error (bad arguments, unknown ``--tensor`` name, ``--hexdump`` of a checkpoint);
* 3 the input cannot be read at all (missing, no permission, not a regular file).

``--json`` prints one JSON document with stable keys on stdout instead of text.
Names are printed with control and format characters escaped (``\\x1b``,
``\\u202e``), so a hostile name cannot rewrite the terminal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray

from reference.format.reader import Reader
from reference.format.source import TensorSource
from reference.ground.errors import FormatError, TensorNotFoundError
from reference.ground.files import open_regular
from reference.ground.text import escape
from reference.sets.fileset import FileSet, is_set_path
from reference.sets.folder import MODEL_FILE
from reference.sources.legacy import Checkpoint, open_checkpoint
from reference.sources.v1 import is_safetensors
from spec.constants import MAGIC
from spec.schema import HEADER_SIZE, TRAILER_SIZE, HeaderFields

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3

#: How ``json.dump(ensure_ascii=True)`` writes a string (its C encoder, when there is one).
_json_string = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def hexdump(data: bytes, start: int) -> list[str]:
    """Classic 16-bytes-a-line dump with absolute offsets."""
    lines = []
    for i in range(0, len(data), 16):
        row = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{start + i:08x}  {hexes:<47}  |{text}|")
    return lines


def summary(reader: Reader, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a valid file (stable keys), but for its last key,
    ``"tensors"``, which :func:`write_json` streams from :func:`tensor_rows`."""
    h = reader.header
    return {
        "valid": True,
        "verified": verified,
        "path": str(reader.path),
        "format_version": f"{h['version_major']}.{h['version_minor']}",
        "file_size": reader.file_size,
        "slab_offset": h["slab_offset"],
        "alignment": h["alignment"],
        "index_offset": h["index_offset"],
        "index_length": h["index_length"],
        "required_flags": h["required_flags"],
        "optional_flags": h["optional_flags"],
        "tensor_count": h["tensor_count"],
        "metadata": reader.metadata,
    }


def tensor_rows(reader: Reader) -> Iterator[dict[str, Any]]:
    """The ``"tensors"`` of the ``--json`` document, in slab order, one at a time."""
    return (info.to_dict() for info in reader.iter_entries())


def write_json(doc: dict[str, Any], tensors: Iterable[dict[str, Any]], out: TextIO) -> None:
    """``json.dump({**doc, "tensors": [*tensors]}, out, indent=2, ensure_ascii=True)``, byte
    for byte, writing one tensor at a time instead of building the list."""
    text = json.dumps({**doc, "tensors": []}, indent=2, ensure_ascii=True)
    tail = "[]\n}"
    out.write(text[: -len(tail)])
    opening = "[\n    "
    for row in tensors:
        out.write(opening + _row_json(row))
        opening = ",\n    "
    out.write(tail if opening.startswith("[") else "\n  ]\n}")


def _row_json(row: dict[str, Any]) -> str:
    """One item of the tensors array as ``json.dump(indent=2)`` writes it at depth 2, for the
    str, int and int-list values of ``TensorInfo.to_dict`` (anything else: ``json.dumps``)."""
    lines = []
    for key, value in row.items():
        if type(value) is str:
            text = _json_string(value)
        elif type(value) is int:
            text = int.__repr__(value)
        elif type(value) is list and all(type(v) is int for v in value):
            items = ",\n".join(f"        {int.__repr__(v)}" for v in value)
            text = f"[\n{items}\n      ]" if value else "[]"
        else:
            return json.dumps(row, indent=2, ensure_ascii=True).replace("\n", "\n    ")
        lines.append(f"      {_json_string(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n    }" if lines else "{}"


def _table_row(t: dict[str, Any]) -> tuple[str, ...]:
    return (
        f"0x{t['offset']:x}",
        f"{t['length']:,}",
        t["dtype"],
        "x".join(map(str, t["shape"])) or "()",
        t["layout"] + (f" {t['bits']}b g{t['group_size']} k{t['k']} n{t['n']}" if "k" in t else ""),
        escape(t["name"]),
    )


def _print_table(reader: Reader, out: TextIO) -> None:
    """The tensor table: column widths in a first pass, the rows in a second (no list kept)."""
    header = ("offset", "bytes", "dtype", "shape", "layout", "name")
    widths = [len(c) for c in header[:5]]
    for row in map(_table_row, tensor_rows(reader)):
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    print("", file=out)
    for row in itertools.chain([header], map(_table_row, tensor_rows(reader))):
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[5]
        print(line, file=out)


def _print_text(doc: dict[str, Any], reader: Reader, out: TextIO) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"AWQ-v2 file {escape(doc['path'])}")
    p(f"  format version   {doc['format_version']}")
    p(f"  file size        {doc['file_size']:,} bytes")
    p(f"  alignment        {doc['alignment']} (slab at 0x{doc['slab_offset']:x})")
    p(f"  index            0x{doc['index_offset']:x}, {doc['index_length']:,} bytes")
    flags = f"required 0x{doc['required_flags']:x}, optional 0x{doc['optional_flags']:x}"
    p(f"  flags            {flags}")
    p(f"  tensors          {doc['tensor_count']}")
    if doc["verified"]:
        p("  checksums        every payload verified")
    meta = json.dumps(doc["metadata"], indent=2, ensure_ascii=True, sort_keys=True)
    meta_lines = meta.splitlines()
    p(
        f"  metadata         {len(meta_lines)} lines"
        if doc["metadata"]
        else "  metadata         none"
    )
    for line in meta_lines[:40] if doc["metadata"] else []:
        p(f"    {line}")
    if len(meta_lines) > 40:
        p(f"    ... {len(meta_lines) - 40} more lines (use --json)")
    if len(reader):
        _print_table(reader, out)


def _tensor_report(source: TensorSource, name: str, out: TextIO) -> None:
    info = source.entry(name)
    array = source.view(info)
    print(f"tensor {escape(name)}: {json.dumps(info.to_dict(), ensure_ascii=True)}", file=out)
    if array.size and (array.dtype.kind in "biuf" or info.dtype in _ML_FLOATS):
        print(f"  {_statistics(array.astype(np.float64))}  elements {array.size}", file=out)
    with np.printoptions(threshold=64, edgeitems=4, linewidth=100):
        print(f"  values:\n{array!r}", file=out)


#: Registry dtypes that reach NumPy as ``ml_dtypes`` floats (NumPy kind ``V``).
_ML_FLOATS = frozenset({"BF16", "F8_E4M3", "F8_E5M2"})


def _statistics(values: NDArray[np.float64]) -> str:
    """``min .. max .. mean .. std`` of the values that are not NaN, and how many are NaN
    (any float tensor may hold some), without NumPy's warnings about NaN or infinities."""
    nan = np.isnan(values)
    rest = values[~nan] if nan.any() else values
    if not rest.size:
        return f"all {values.size} values NaN"
    with np.errstate(invalid="ignore", over="ignore"):  # infinities: mean inf, std nan
        stats = (
            f"min {rest.min():.6g}  max {rest.max():.6g}  "
            f"mean {rest.mean():.6g}  std {rest.std():.6g}"
        )
    return f"{stats}  NaN {int(nan.sum())}" if nan.any() else stats


def _unreadable(path: str, exc: OSError) -> int:
    print(f"error: cannot read {escape(path)}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_IO


def _report_tensor(source: TensorSource, name: str, out: TextIO) -> int:
    """``--tensor NAME``: its report, or a usage error when the source has no such tensor."""
    try:
        _tensor_report(source, name, out)
    except TensorNotFoundError:
        print(f"error: no tensor named {escape(name)!r}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _hexdumps(path: str, size: int, out: TextIO) -> None:
    with open_regular(path) as f:
        head = f.read(HEADER_SIZE)
        f.seek(max(size - TRAILER_SIZE, 0))
        tail = f.read(TRAILER_SIZE)
    print("header:", file=out)
    for line in hexdump(head, 0):
        print("  " + line, file=out)
    print("trailer:", file=out)
    for line in hexdump(tail, max(size - TRAILER_SIZE, 0)):
        print("  " + line, file=out)


def _raw_header(path: str) -> dict[str, Any] | None:
    """Header fields parsed without any check, to help explain an invalid file."""
    with open_regular(path) as f:
        data = f.read(HEADER_SIZE)
    if len(data) < HeaderFields.sizeof():
        return None
    try:
        parsed = HeaderFields.parse(data[: HeaderFields.sizeof()])
    except Exception:  # magic mismatch: construct's Const raises; show nothing
        return None
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in parsed.items() if k != "_io"}


def checkpoint_summary(src: Checkpoint, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a legacy checkpoint (stable keys), ``"tensors"`` last."""
    return {
        "valid": True,
        "verified": verified,
        "path": str(src.path),
        "source_format": src.source_format,
        "files": [{"name": f.name, "size": f.stat().st_size} for f in src.files],
        "tensor_count": len(src),
        "layers": src.layers(),
        "metadata": src.metadata,
    }


def _is_checkpoint(path: str) -> bool:
    """What ``reference.open`` reads as a legacy checkpoint: a folder, or a file that starts
    like safetensors rather than with the AWQ-v2 magic."""
    if os.path.isdir(path):
        return True
    with open_regular(path) as f:
        head = f.read(len(MAGIC))
    return head != MAGIC and is_safetensors(Path(path))


def _dump_checkpoint(args: argparse.Namespace, out: TextIO) -> int:
    """Explain an AWQ v1 or compressed-tensors checkpoint: what it is, its files, its
    configuration and the tensors as ``reference.open`` presents them (AWQ layouts)."""
    if args.hexdump:
        print("error: --hexdump shows an AWQ-v2 header and trailer; this is a legacy "
              "checkpoint", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        with open_checkpoint(args.file) as src:
            src.validate()
            if args.verify:
                src.verify()
            doc = checkpoint_summary(src, verified=args.verify)
            rows = (info.to_dict() for info in src.entries())
            if args.json:
                write_json(doc, rows, out)
                print(file=out)
            else:
                _print_checkpoint(doc, rows, out)
            if args.tensor is not None:
                if _report_tensor(src, args.tensor, out) != EXIT_OK:
                    return EXIT_USAGE
    except FormatError as exc:
        return _report_invalid(args, exc, out)
    except BrokenPipeError:
        raise  # stdout closed early (`| head`): the entry point's business, not the input's
    except OSError as exc:
        return _unreadable(args.file, exc)
    return EXIT_OK


def _print_checkpoint(doc: dict[str, Any], rows: Iterable[dict[str, Any]], out: TextIO) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"legacy checkpoint {escape(doc['path'])} (not AWQ-v2)")
    p(f"  source format    {doc['source_format']}")
    total = sum(f["size"] for f in doc["files"])
    p(f"  files            {len(doc['files'])}, {total:,} bytes")
    for f in doc["files"]:
        p(f"    {escape(f['name'])}  {f['size']:,} bytes")
    p(f"  tensors          {doc['tensor_count']} (quantised layers in the AWQ layouts)")
    p(f"  layers           {len(doc['layers'])}")
    p("  checksums        none stored" + ("; every tensor read" if doc["verified"] else ""))
    meta = json.dumps(doc["metadata"], indent=2, ensure_ascii=True, sort_keys=True).splitlines()
    p(f"  configuration    {len(meta)} lines" if doc["metadata"] else "  configuration    none")
    for line in meta[:40] if doc["metadata"] else []:
        p(f"    {line}")
    if len(meta) > 40:
        p(f"    ... {len(meta) - 40} more lines (use --json)")
    p("  convert with     python -m reference.convert SRC DST")
    table = [_legacy_row(r) for r in rows]
    if table:
        header = ("bytes", "dtype", "shape", "layout", "name")
        widths = [max(len(r[i]) for r in [header, *table]) for i in range(4)]
        p("")
        for row in [header, *table]:
            p("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4])


def _legacy_row(t: dict[str, Any]) -> tuple[str, ...]:
    """A table row without the offset (it is within one of several files)."""
    return _table_row(t)[1:]


def set_summary(fs: FileSet, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a valid file set (stable keys), ``"tensors"`` last: the set,
    then each member as the manifest lists it with what it holds."""
    files = []
    for m, reader in zip(fs.manifest.members, fs.members, strict=True):
        item: dict[str, Any] = {"name": m.name, "size": m.size}
        if fs.kind == "rank":
            item["rank"] = m.rank
        item.update(header_crc=f"{m.header_crc:08x}", sha256=m.sha256,
                    format_version="{}.{}".format(*reader.version), tensor_count=len(reader),
                    layers=len(reader.layers()))  # fmt: skip
        files.append(item)
    return {
        "valid": True,
        "verified": verified,
        "path": str(fs.manifest_path),
        "kind": fs.kind,
        "tp_size": fs.tp_size,
        "files": files,
        "total_size": sum(f["size"] for f in files),
        "tensor_count": len(fs),
        "layers": len(fs.layers()),
        "metadata": fs.metadata,
    }


def set_rows(fs: FileSet) -> Iterator[dict[str, Any]]:
    """The ``"tensors"`` of a set's ``--json`` document: every member's (of a rank set, every
    rank's), member by member, each row with its ``file`` (and ``rank``) first."""
    for rank in range(fs.tp_size):
        for reader in fs.rank_members(rank):
            for info in reader.iter_entries():
                head: dict[str, Any] = {"file": reader.path.name}
                if fs.kind == "rank":
                    head["rank"] = rank
                yield {**head, **info.to_dict()}


def _dump_set(args: argparse.Namespace, out: TextIO) -> int:
    """Explain a file set: the manifest, each member, then every tensor with its file."""
    if args.hexdump:
        print("error: --hexdump shows one AWQ-v2 file's header and trailer; dump a member of "
              "the set", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        with FileSet(args.file, validate=True) as fs:
            if args.verify:
                fs.verify()
            doc = set_summary(fs, verified=args.verify)
            if args.json:
                write_json(doc, set_rows(fs), out)
                print(file=out)
            else:
                _print_set(doc, fs, out)
            if args.tensor is not None:
                if _report_tensor(fs, args.tensor, out) != EXIT_OK:
                    return EXIT_USAGE
    except FormatError as exc:
        return _report_invalid(args, exc, out)
    except BrokenPipeError:
        raise
    except OSError as exc:
        return _unreadable(args.file, exc)
    return EXIT_OK


def _print_set(doc: dict[str, Any], fs: FileSet, out: TextIO) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    kind = "one file per tensor-parallel rank" if doc["kind"] == "rank" else "split by size"
    p(f"AWQ-v2 file set {escape(doc['path'])}")
    p(f"  kind             {doc['kind']} ({kind})" + (
        f", tp_size {doc['tp_size']}" if doc["kind"] == "rank" else ""))  # fmt: skip
    p(f"  files            {len(doc['files'])}, {doc['total_size']:,} bytes")
    for f in doc["files"]:
        rank = f"rank {f['rank']}  " if "rank" in f else ""
        p(f"    {escape(f['name'])}  {rank}{f['size']:,} bytes  {f['tensor_count']} tensors, "
          f"{f['layers']} layers  header_crc {f['header_crc']}")  # fmt: skip
    where = "every rank holds" if doc["kind"] == "rank" else "in all"
    p(f"  tensors          {doc['tensor_count']} ({where}), {doc['layers']} quantised layers")
    p("  checked          manifest, every member, no extra .awq2 file, names"
      + (", ranks" if doc["kind"] == "rank" else "")
      + ("; every payload checksum and SHA-256 verified" if doc["verified"] else ""))  # fmt: skip
    meta = json.dumps(doc["metadata"], indent=2, ensure_ascii=True, sort_keys=True).splitlines()
    p(f"  metadata         {len(meta)} lines (the first member's)" if doc["metadata"]
      else "  metadata         none")  # fmt: skip
    for line in meta[:40] if doc["metadata"] else []:
        p(f"    {line}")
    if len(meta) > 40:
        p(f"    ... {len(meta) - 40} more lines (use --json)")
    rows = [(escape(r["file"]), *_table_row(r)) for r in set_rows(fs)]
    if rows:
        header = ("file", "offset", "bytes", "dtype", "shape", "layout", "name")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
        p("")
        for row in [header, *rows]:
            p("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[6])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reference.dump",
        description="Explain an AWQ-v2 file: header, flags, metadata and a tensor table; a "
        "file set (its folder or manifest): its kind, every member and every tensor with its "
        "file; or a legacy checkpoint (AWQ v1 or compressed-tensors folder or safetensors "
        "file): its format, files, configuration and tensors as reference.open presents "
        "them. The input is fully validated first; an invalid one prints its error code, "
        "offset and message and exits 1.",
        epilog="exit status: 0 valid, 1 invalid input, 2 usage error, 3 unreadable input",
    )
    parser.add_argument("file", help="the .awq2 file, a model folder, a file set's folder or "
                        "manifest, or a checkpoint folder or file")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON document with stable keys")
    parser.add_argument("--verify", action="store_true", help="also check every payload checksum")
    parser.add_argument("--tensor", metavar="NAME", help="print one tensor's values and statistics")
    parser.add_argument("--hexdump", action="store_true", help="hex dump of the header and trailer")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    if is_set_path(Path(args.file)):
        return _dump_set(args, out)
    if os.path.isdir(args.file) and os.path.isfile(os.path.join(args.file, MODEL_FILE)):
        args.file = os.path.join(args.file, MODEL_FILE)  # a model folder: its weights file
    try:
        checkpoint = _is_checkpoint(args.file)
    except OSError as exc:
        return _unreadable(args.file, exc)
    if checkpoint:
        return _dump_checkpoint(args, out)
    try:
        reader = Reader(args.file, validate=True)
    except FormatError as exc:
        return _report_invalid(args, exc, out)
    except OSError as exc:
        return _unreadable(args.file, exc)
    with reader:
        try:
            if args.verify:
                reader.verify()
            doc = summary(reader, verified=args.verify)
            if args.json:
                write_json(doc, tensor_rows(reader), out)
                print(file=out)
            else:
                _print_text(doc, reader, out)
        except FormatError as exc:
            return _report_invalid(args, exc, out)
        if args.hexdump and not args.json:
            _hexdumps(args.file, reader.file_size, out)
        if args.tensor is not None:
            if _report_tensor(reader, args.tensor, out) != EXIT_OK:
                return EXIT_USAGE
    return EXIT_OK


def _report_invalid(args: argparse.Namespace, exc: FormatError, out: TextIO) -> int:
    is_file = os.path.isfile(args.file)
    if args.json:
        doc = {
            "valid": False,
            "path": args.file,
            "error": {**exc.to_dict(), **({"file": exc.path} if exc.path else {})},
            "header": _raw_header(args.file) if is_file else None,
        }
        json.dump(doc, out, indent=2, ensure_ascii=True, default=str)
        print(file=out)
        return EXIT_INVALID
    where = f"0x{exc.offset:x}" if exc.offset is not None else "?"
    print(f"INVALID {escape(args.file)}", file=out)
    print(f"  error    {exc.code}", file=out)
    print(f"  offset   {where}" + (f" ({exc.offset})" if exc.offset is not None else ""), file=out)
    print(f"  message  {escape(exc.message)}", file=out)
    if exc.path and exc.path != args.file:
        print(f"  file     {escape(exc.path)}", file=out)
    if exc.expected is not None or exc.found is not None:
        print(f"  expected {escape(str(exc.expected))}", file=out)
        print(f"  found    {escape(str(exc.found))}", file=out)
    if exc.requirements:
        print(f"  see      {', '.join(exc.requirements)}", file=out)
    raw = _raw_header(args.file) if is_file else None
    if raw:
        print("  header fields as stored (unvalidated):", file=out)
        for key, value in raw.items():
            print(f"    {key:<16} {value}", file=out)
    if args.hexdump and is_file:
        _hexdumps(args.file, os.path.getsize(args.file), out)
    return EXIT_INVALID


def _entry_point() -> int:
    """Console-script entry: like main(), but quiet when stdout is closed early (`| head`)."""
    try:
        return main()
    except BrokenPipeError:
        sys.stdout = None  # type: ignore[assignment]  # no flush error at exit
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(_entry_point())
