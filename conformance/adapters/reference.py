"""The reference implementation as a conformance loader.

Usage: ``python -m conformance.adapters.reference PATH``: an AWQ-v2 file, or a file set's
folder (spec 2.1: the folder holding ``model.awq2.set.json``).

Protocol (docs/conformance/index.md): full validation and every checksum; on success exit 0
and print the adapter JSON document (``conformance/schema/adapter-output.schema.json``);
on a format error exit 1 and print ``{"error": {"code": ..., "offset": ..., "message": ...}}``
(``conformance/schema/adapter-error.schema.json``).  Every number is printed as the file
writes it: the metadata comes from the file's own bytes, read back with
:mod:`conformance.exactjson` once the reader has checked them [ADP-1].
Exit 2: usage error.  Exit 3: the file cannot be read (missing, or not a regular file: a folder,
a FIFO, a device, refused at once by ``reference.ground.files.open_regular``), with the
reason in one line on stderr, as ``python -m reference.dump`` says it; or any other exception
(a crash, with its traceback).  The C loader (``adapters/c``) uses the same statuses.
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import reference
from conformance import exactjson
from reference.format.layers import unpack
from reference.ground.text import escape
from reference.sets.fileset import FileSet, is_set_path

EXIT_USAGE = 2
EXIT_FAILED = 3


def _sha(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def describe(path: str) -> dict[str, Any]:
    """What the reference reader reads from a file, or from a file set's folder, in the adapter
    output format."""
    if is_set_path(Path(path)) and Path(path).is_dir():
        return describe_set(path)
    with reference.Reader(path, validate=True) as f:
        f.verify()
        return {
            "format_version": "{}.{}".format(*f.version),
            "tensors": _tensors(f),
            "layers": _layers(f),
            "metadata": _metadata_as_written(f),
        }


def describe_set(path: str) -> dict[str, Any]:
    """A file set: every member's tensors and layers (each with ``rank`` in a rank set), the
    first member's version and metadata, and the set's kind [SET-8, SET-10]."""
    with FileSet(path, validate=True) as s:
        s.verify()
        first = s.members[0]
        doc: dict[str, Any] = {
            "format_version": "{}.{}".format(*first.version),
            "set": {"kind": s.kind} | ({"tp_size": s.tp_size} if s.kind == "rank" else {}),
            "tensors": [],
            "layers": [],
            "metadata": _metadata_as_written(first),
        }
        for rank in range(s.tp_size):
            tag = {"rank": rank} if s.kind == "rank" else {}
            for member in s.rank_members(rank):
                doc["tensors"] += [t | tag for t in _tensors(member)]
                doc["layers"] += [layer | tag for layer in _layers(member)]
        return doc


def _tensors(f: reference.Reader) -> list[dict[str, Any]]:
    tensors = []
    for info in sorted(f.entries(), key=lambda t: t.name):
        view = f.tensor(info.name)
        tensors.append(
            {
                "name": info.name,
                "dtype": info.dtype,
                "shape": list(info.shape),
                "layout": info.layout,
                "sha256": _sha(view),
            }
        )
    return tensors


def _layers(f: reference.Reader) -> list[dict[str, Any]]:
    layers = []
    for prefix in f.layers():
        layer = f.linear(prefix)
        q, z, s = unpack(layer)
        layers.append(
            {
                "prefix": prefix,
                "layout": layer.layout,
                "k": layer.k,
                "n": layer.n,
                "bits": layer.bits,
                "group_size": layer.group_size,
                "scale_dtype": layer.scale_dtype,
                "codes_sha256": _sha(q),
                "zeros_sha256": _sha(z),
                "scales_sha256": _sha(s),
                "dequantized_sha256": _sha(f.dequantize(prefix).astype("<f4")),
            }
        )
    return layers


def _metadata_as_written(f: reference.Reader) -> Any:
    """The metadata object with its numbers as the file writes them [ADP-1]: the checked
    bytes (META-1 to META-6, by ``verify``) parsed again, keeping each number's lexeme."""
    section = f.index.geometry.metadata
    raw = bytes(f.index.data[section.offset : section.end])
    return exactjson.loads(raw) if raw else {}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m conformance.adapters.reference FILE", file=sys.stderr)
        return EXIT_USAGE
    try:
        doc = describe(args[0])
    except reference.FormatError as exc:
        print(json.dumps({"error": exc.to_dict()}))
        return 1
    except OSError as exc:  # an unreadable input is no reject (exit 1) either
        print(f"error: cannot read {escape(args[0])}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception:  # any other exception is a crash, never a reject (exit 1)
        traceback.print_exc()
        return EXIT_FAILED
    print(exactjson.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
