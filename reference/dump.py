"""``awq2-dump PATH`` (``python -m reference.dump PATH``): explain what ``reference.open``
opens, valid or not: an AWQ-v2 file, a model folder holding ``model.awq2``, a file set (its
folder or its manifest: the set, then each member, by rank for a rank set), or a legacy
checkpoint (an AWQ v1 or compressed-tensors folder, or one of its safetensors files).

The text is short: the format facts, a few lines summing up the configuration (architecture,
hidden layers, hidden size, quantisation, source format) and the tensor table; ``--config``
prints the whole configuration.  ``--tensor NAME`` explains one tensor, ``--layer PREFIX``
one quantised layer (its stored tensors and its dequantised weights); of a rank set, the
shard of ``--rank R``.  Either prints one line naming the input and only that, not the whole
report.  A model's ``config.json`` given instead of its folder is ``CONFIG_NOT_WEIGHTS``,
naming the folder.

Exit status:

* 0 the input is valid (and, with ``--verify``, every payload checksum matches; a legacy
  checkpoint has none, so every tensor is read once instead);
* 1 the input is not valid: the error code, offset and message are printed;
* 2 usage error (bad arguments, unknown ``--tensor`` or ``--layer`` name, a layer given to
  ``--tensor``, a rank set's tensor without ``--rank``, ``--hexdump`` of a checkpoint);
* 3 the input cannot be read at all (missing, no permission, not a regular file);
* 130 interrupted (Ctrl-C): one line on stderr, no traceback.

``--json`` prints one JSON document with stable keys on stdout instead of text (with
``--tensor`` or ``--layer``: that tensor's or layer's document alone).
Names are printed with control and format characters escaped (``\\x1b``,
``\\u202e``), so a hostile name cannot rewrite the terminal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from reference.describe.documents import (
    checkpoint_summary,
    family,
    is_checkpoint,
    not_weights,
    raw_header,
    set_rows,
    set_summary,
    summary,
    tensor_rows,
)
from reference.describe.one import UsageError, layer_doc, rank_kw, tensor_doc
from reference.format.reader import Reader
from reference.ground.errors import FormatError
from reference.ground.files import open_regular
from reference.ground.text import escape
from reference.sets.fileset import FileSet, dangling_link, is_set_path
from reference.sets.folder import MODEL_FILE
from reference.sources.legacy import open_checkpoint
from spec.schema import HEADER_SIZE, TRAILER_SIZE

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  #: Ctrl-C: 128 + SIGINT, as a shell reports it

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


def _line(label: str, value: str) -> str:
    """One ``label  value`` line of the text header, the values in one column."""
    return f"  {label:<17}{value}"


def _config_lines(metadata: dict[str, Any], rows: Iterable[dict[str, Any]]) -> list[str]:
    """A few lines summing up the configuration: the model (``metadata["config"]``, what
    ``config.json`` said), the quantisation of the layers as stored (from the table's
    ``.qweight`` rows, so whatever the source's ``quantization_config`` schema) and the
    source format (the provenance a converter recorded)."""
    config = metadata.get("config")
    lines = []
    if isinstance(config, dict):
        architectures = config.get("architectures")
        if isinstance(architectures, list) and architectures:
            lines.append(_line("architecture", escape(", ".join(map(str, architectures)))))
        for key, label in (("num_hidden_layers", "hidden layers"), ("hidden_size", "hidden size")):
            if key in config:
                lines.append(_line(label, escape(str(config[key]))))
    quantisation = _quantisation(rows)
    if quantisation:
        lines.append(_line("quantisation", quantisation))
    provenance = metadata.get("provenance")
    if isinstance(provenance, dict) and "source_format" in provenance:
        lines.append(_line("source format", escape(str(provenance["source_format"]))))
    return lines


def _group(group_size: int) -> str:
    return "channelwise" if group_size == -1 else f"group size {group_size}"


def _quantisation(rows: Iterable[dict[str, Any]]) -> str | None:
    """``4-bit, group size 128, Marlin (14 layers)``: the quantised layers by bits, group size
    and layout family; None when there is none."""
    counts: Counter[tuple[int, int, str]] = Counter()
    for t in rows:
        if t["layout"] in _QWEIGHTS and t["name"].endswith(".qweight"):
            counts[(t["bits"], t["group_size"], family(t["layout"]))] += 1
    parts = [f"{bits}-bit, {_group(group)}, {family} ({n} layer{'' if n == 1 else 's'})"
             for (bits, group, family), n in sorted(counts.items())]  # fmt: skip
    return "; ".join(parts) or None


_QWEIGHTS = ("MARLIN_QWEIGHT", "AWQ_QWEIGHT")


def _print_metadata(
    metadata: dict[str, Any], out: TextIO, *, whole: bool, label: str = "metadata", what: str = ""
) -> None:
    """The configuration's line count; with ``--config`` (``whole``), every line of it."""
    p = lambda *a: print(*a, file=out)  # noqa: E731
    if not metadata:
        p(_line(label, "none"))
        return
    lines = json.dumps(metadata, indent=2, ensure_ascii=True, sort_keys=True).splitlines()
    if not whole:
        p(_line(label, f"{len(lines)} lines{what} (--config prints them)"))
        return
    p(_line(label, f"{len(lines)} lines{what}"))
    for line in lines:
        p(f"    {line}")


def _print_text(doc: dict[str, Any], reader: Reader, out: TextIO, *, whole: bool) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"AWQ-v2 file {escape(doc['path'])}")
    p(_line("format version", doc["format_version"]))
    p(_line("file size", f"{doc['file_size']:,} bytes"))
    p(_line("alignment", f"{doc['alignment']} (slab at 0x{doc['slab_offset']:x})"))
    p(_line("index", f"0x{doc['index_offset']:x}, {doc['index_length']:,} bytes"))
    p(_line("flags", f"required 0x{doc['required_flags']:x}, optional 0x{doc['optional_flags']:x}"))
    p(_line("tensors", str(doc["tensor_count"])))
    if doc["verified"]:
        p(_line("checksums", "every payload verified"))
    for line in _config_lines(doc["metadata"], tensor_rows(reader)):
        p(line)
    _print_metadata(doc["metadata"], out, whole=whole)
    if len(reader):
        _print_table(reader, out)


def _show_stats(stats: dict[str, Any]) -> str:
    if stats["min"] is None:
        return f"all {stats['elements']} values NaN"
    text = "  ".join(f"{key} {stats[key]:.6g}" for key in ("min", "max", "mean", "std"))
    return f"{text}  NaN {stats['nan']}" if stats["nan"] else text


def _json_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Statistics as strict JSON: a non-finite float as the string ``"inf"``, ``"-inf"`` or
    ``"nan"``."""
    return {k: v if not isinstance(v, float) or np.isfinite(v) else str(v)
            for k, v in stats.items()}  # fmt: skip


def _unreadable(path: str, exc: OSError) -> int:
    print(f"error: cannot read {escape(path)}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_IO


# ------------------------------------------------------------------ --tensor and --layer


def _print_tensor(doc: dict[str, Any], array: Any, out: TextIO) -> None:
    info = doc["tensor"]
    print(f"tensor {escape(info['name'])}: {json.dumps(info, ensure_ascii=True)}", file=out)
    if doc["statistics"] is not None:
        stats = doc["statistics"]
        print(f"  {_show_stats(stats)}  elements {stats['elements']}", file=out)
    with np.printoptions(threshold=64, edgeitems=4, linewidth=100):
        print(f"  values:\n{array!r}", file=out)


def _print_layer(doc: dict[str, Any], out: TextIO) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    layer = doc["layer"]
    p(f"layer {escape(layer['prefix'])}" + (f" (rank {layer['rank']}'s shard)"
                                            if "rank" in layer else ""))  # fmt: skip
    p(_line("bits", str(layer["bits"])))
    p(_line("group size", _group(layer["group_size"]).removeprefix("group size ")))
    p(_line("stored layout", "Marlin" if layer["layout"] == "MARLIN" else "AWQ"))
    p(_line("in features", f"{layer['in_features']} (k)"))
    p(_line("out features", f"{layer['out_features']} (n)"))
    p(_line("scales", layer["scale_dtype"]))
    p(_line("stored tensors", str(len(layer["tensors"]))))
    rows = [_table_row(t)[1:] for t in layer["tensors"]]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        p("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4])
    w = layer["weights"]
    shape = "x".join(map(str, w["shape"]))
    p(_line("dequantised", f"float32 {shape}: {_show_stats(w)}"))


def _one(source: Any, args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """``--tensor`` or ``--layer``: its document (and the tensor's array), or ``UsageError``."""
    name = args.tensor if args.tensor is not None else args.layer
    kw = rank_kw(source, args.rank, escape(name))
    if args.tensor is not None:
        return tensor_doc(source, name, kw)
    return layer_doc(source, name, kw), None


def _headline(doc: dict[str, Any]) -> str:
    """The one line printed above ``--tensor`` and ``--layer``: what the input is, that it
    is valid, and how much of it was checked (the whole report is the command without them)."""
    verified = ", every payload checksum verified" if doc["verified"] else ""
    path = escape(doc["path"])
    if "kind" in doc:  # a file set
        tp = f", tp_size {doc['tp_size']}" if doc["kind"] == "rank" else ""
        return (f"AWQ-v2 file set {path}: valid, {doc['kind']} set{tp}, {len(doc['files'])} "
                f"files, {doc['tensor_count']} tensors{verified}")  # fmt: skip
    if "source_format" in doc:  # a legacy checkpoint: no checksums, every tensor read instead
        read = ", every tensor read" if doc["verified"] else ""
        return (f"legacy checkpoint {path} (not AWQ-v2): valid, {doc['source_format']}, "
                f"{doc['tensor_count']} tensors{read}")  # fmt: skip
    return (f"AWQ-v2 file {path}: valid, format {doc['format_version']}, "
            f"{doc['tensor_count']} tensors{verified}")  # fmt: skip


def _explain(args: argparse.Namespace, out: TextIO, source: Any, doc: dict[str, Any],
             rows: Callable[[], Iterable[dict[str, Any]]], text: Callable[[], None],
             tail: Callable[[], None] = lambda: None) -> int:  # fmt: skip
    """Print what was asked of a validated source: its ``--json`` document (streaming the
    tensors from ``rows``) or its ``text``.  With ``--tensor`` or ``--layer``, that report is
    made first (a usage error prints nothing on stdout), then printed below a one-line
    :func:`_headline` and followed by ``tail`` (the hex dumps asked for), or with ``--json``
    alone: one JSON document, ``valid``, ``verified`` and ``path`` first."""
    if args.tensor is None and args.layer is None:
        if args.json:
            write_json(doc, rows(), out)
            print(file=out)
        else:
            text()
        return EXIT_OK
    try:
        one, array = _one(source, args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        if one.get("statistics") is not None:
            one["statistics"] = _json_stats(one["statistics"])
        if "layer" in one:
            one["layer"]["weights"] = _json_stats(one["layer"]["weights"])
        head = {"valid": True, "verified": doc["verified"], "path": doc["path"]}
        json.dump({**head, **one}, out, indent=2, ensure_ascii=True)
        print(file=out)
        return EXIT_OK
    print(_headline(doc), file=out)
    print(file=out)
    if args.tensor is not None:
        _print_tensor(one, array, out)
    else:
        _print_layer(one, out)
    tail()
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

            def rows() -> Iterator[dict[str, Any]]:
                return (info.to_dict() for info in src.entries())

            def text() -> None:
                _print_checkpoint(doc, rows, out, whole=args.config)

            return _explain(args, out, src, doc, rows, text)
    except FormatError as exc:
        return _report_invalid(args, exc, out)
    except BrokenPipeError:
        raise  # stdout closed early (`| head`): the entry point's business, not the input's
    except OSError as exc:
        return _unreadable(args.file, exc)


def _print_checkpoint(doc: dict[str, Any], rows: Callable[[], Iterable[dict[str, Any]]],
                      out: TextIO, *, whole: bool) -> None:  # fmt: skip
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"legacy checkpoint {escape(doc['path'])} (not AWQ-v2)")
    p(_line("source format", doc["source_format"]))
    total = sum(f["size"] for f in doc["files"])
    p(_line("files", f"{len(doc['files'])}, {total:,} bytes"))
    for f in doc["files"]:
        p(f"    {escape(f['name'])}  {f['size']:,} bytes")
    p(_line("tensors", f"{doc['tensor_count']} (quantised layers in the AWQ layouts)"))
    p(_line("layers", str(len(doc["layers"]))))
    p(_line("checksums", "none stored" + ("; every tensor read" if doc["verified"] else "")))
    for line in _config_lines(doc["metadata"], rows()):
        p(line)
    _print_metadata(doc["metadata"], out, whole=whole, label="configuration")
    if doc["layers"]:
        p(_line("convert with", "awq2-convert SRC DST"))
    else:  # what awq2-convert would refuse (NOT_QUANTISED) is not suggested [CONV-4]
        p(_line("convert", "nothing to convert: no quantised layer (quantise it first, e.g. "
                "AWQ W4A16 with AutoAWQ or llm-compressor)"))  # fmt: skip
    table = [_legacy_row(r) for r in rows()]
    if table:
        header = ("bytes", "dtype", "shape", "layout", "name")
        widths = [max(len(r[i]) for r in [header, *table]) for i in range(4)]
        p("")
        for row in [header, *table]:
            p("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4])


def _legacy_row(t: dict[str, Any]) -> tuple[str, ...]:
    """A table row without the offset (it is within one of several files)."""
    return _table_row(t)[1:]


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
            doc = set_summary(fs, verified=args.verify)  # a rank set's metadata: [SET-14]
            return _explain(args, out, fs, doc, lambda: set_rows(fs),
                            lambda: _print_set(doc, fs, out, whole=args.config))  # fmt: skip
    except FormatError as exc:
        return _report_invalid(args, not_weights(args.file, exc), out)
    except BrokenPipeError:
        raise
    except OSError as exc:
        return _unreadable(args.file, exc)


def _print_members(doc: dict[str, Any], out: TextIO) -> None:
    """Each member as the manifest lists it; of a rank set, grouped by rank."""
    p = lambda *a: print(*a, file=out)  # noqa: E731

    def member(f: dict[str, Any], indent: str) -> str:
        return (f"{indent}{escape(f['name'])}  {f['size']:,} bytes  {f['tensor_count']} "
                f"tensors, {f['layers']} layers  header_crc {f['header_crc']}")  # fmt: skip

    if doc["kind"] != "rank":
        for f in doc["files"]:
            p(member(f, "    "))
        return
    for rank in range(doc["tp_size"]):
        p(f"    rank {rank}")
        for f in doc["files"]:
            if f["rank"] == rank:
                p(member(f, "      "))


def _print_set(doc: dict[str, Any], fs: FileSet, out: TextIO, *, whole: bool) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    ranks = doc["kind"] == "rank"
    kind = "one file per tensor-parallel rank" if ranks else "split by size"
    p(f"AWQ-v2 file set {escape(doc['path'])}")
    p(_line("kind", f"{doc['kind']} ({kind})" + (f", tp_size {doc['tp_size']}" if ranks else "")))
    p(_line("files", f"{len(doc['files'])}, {doc['total_size']:,} bytes"))
    _print_members(doc, out)
    where = "every rank holds" if ranks else "in all"
    p(_line("tensors", f"{doc['tensor_count']} ({where}), {doc['layers']} quantised layers"))
    checked = "manifest, every member, no extra .awq2 file, names" + (
        ", ranks, metadata" if ranks else ""
    )
    verified = "; every payload checksum and SHA-256 verified" if doc["verified"] else ""
    p(_line("checked", checked + verified))
    first_rank = (r for r in set_rows(fs) if r.get("rank", 0) == 0)  # what every rank holds
    for line in _config_lines(doc["metadata"], first_rank):
        p(line)
    what = ", the same in every member" if ranks else ", the first member's"
    _print_metadata(doc["metadata"], out, whole=whole, what=what)
    rows = [(escape(r["file"]), *_table_row(r)) for r in set_rows(fs)]
    if rows:
        header = ("file", "offset", "bytes", "dtype", "shape", "layout", "name")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
        p("")
        for row in [header, *rows]:
            p("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[6])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="awq2-dump",
        description="Explain an AWQ-v2 file: header, flags, a summary of its configuration and "
        "a tensor table; a file set (its folder or manifest): its kind, every member (by rank "
        "for a rank set) and every tensor with its file; or a legacy checkpoint (AWQ v1 or "
        "compressed-tensors folder or safetensors file): its format, files, configuration and "
        "tensors as reference.open presents them. The input is fully validated first; an "
        "invalid one prints its error code, offset and message and exits 1.",
        epilog="exit status: 0 valid, 1 invalid input, 2 usage error, 3 unreadable input, "
        "130 interrupted (Ctrl-C)",
    )
    parser.add_argument("file", help="the .awq2 file, a model folder, a file set's folder or "
                        "manifest, or a checkpoint folder or file")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON document with stable keys")
    parser.add_argument("--verify", action="store_true", help="also check every payload checksum")
    parser.add_argument("--config", action="store_true", help="print the whole configuration "
                        "(the metadata), not its summary")  # fmt: skip
    one = parser.add_mutually_exclusive_group()
    one.add_argument("--tensor", metavar="NAME", help="print one tensor's values and "
                     "statistics (below one line naming the input, without the whole "
                     "report)")  # fmt: skip
    one.add_argument("--layer", metavar="PREFIX", help="explain one quantised layer: bits, "
                     "group size, stored layout, in/out features, its stored tensors and "
                     "statistics of its dequantised weights (below one line naming the input, "
                     "without the whole report)")  # fmt: skip
    parser.add_argument("--rank", metavar="R", type=int, help="of a rank set: the rank whose "
                        "shard --tensor or --layer shows (each rank holds its own)")  # fmt: skip
    parser.add_argument("--hexdump", action="store_true", help="hex dump of the header and trailer")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.rank is not None and args.tensor is None and args.layer is None:
            parser.error("--rank selects the shard that --tensor or --layer shows; give one")
        return _dump(args, out or sys.stdout)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dump(args: argparse.Namespace, out: TextIO) -> int:
    if is_set_path(Path(args.file)):
        return _dump_set(args, out)
    weights = os.path.join(args.file, MODEL_FILE)
    if os.path.isdir(args.file) and os.path.lexists(weights):  # a link to nothing too
        broken = dangling_link(Path(weights))
        if broken is not None:  # unreadable, never a checkpoint of another format
            return _unreadable(weights, broken)
        args.file = weights  # a model folder: its weights file
    try:
        checkpoint = is_checkpoint(args.file)
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
        except FormatError as exc:
            return _report_invalid(args, exc, out)

        def hexdumps() -> None:
            if args.hexdump:
                _hexdumps(args.file, reader.file_size, out)

        def text() -> None:
            _print_text(doc, reader, out, whole=args.config)
            hexdumps()

        return _explain(args, out, reader, doc, lambda: tensor_rows(reader), text, hexdumps)


def _report_invalid(args: argparse.Namespace, exc: FormatError, out: TextIO) -> int:
    is_file = os.path.isfile(args.file)
    if args.json:
        doc = {
            "valid": False,
            "path": args.file,
            "error": {**exc.to_dict(), **({"file": exc.path} if exc.path else {})},
            "header": raw_header(args.file) if is_file else None,
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
    raw = raw_header(args.file) if is_file else None
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
