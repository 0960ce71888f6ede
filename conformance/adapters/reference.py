"""The reference implementation as a conformance loader.

Usage: ``python -m conformance.adapters.reference FILE``.

Protocol (docs/conformance/index.md): full validation and every checksum; on success exit 0
and print the adapter JSON document (``conformance/schema/adapter-output.schema.json``);
on a format error exit 1 and print ``{"error": {"code": ..., "offset": ..., "message": ...}}``
(``conformance/schema/adapter-error.schema.json``).  Every number is printed as the file
writes it: the metadata comes from the file's own bytes, read back with
:mod:`conformance.exactjson` once the reader has checked them [ADP-1].
Exit 2: usage error.  Exit 3: the file cannot be read (missing, or not a regular file: a folder,
a FIFO, a device, refused at once by ``reference.files.open_regular``), with the reason in one
line on stderr, as ``python -m reference.dump`` says it; or any other exception (a crash, with
its traceback).  The C loader (``adapters/c``) uses the same statuses.
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

import reference
from conformance import exactjson
from reference.layers import unpack
from reference.text import escape

EXIT_USAGE = 2
EXIT_FAILED = 3


def _sha(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def describe(path: str) -> dict[str, Any]:
    """What the reference reader reads from a file, in the adapter output format."""
    with reference.Reader(path, validate=True) as f:
        f.verify()
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
        return {
            "format_version": "{}.{}".format(*f.version),
            "tensors": tensors,
            "layers": layers,
            "metadata": _metadata_as_written(f),
        }


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
