"""safetensors' own Python tests, adapted to run against this project's API (issue 39).

    python -m tools.safetensors_suite            # rewrite the adapted files from the pristine ones
    python -m tools.safetensors_suite --check    # exit 1 if an adapted file is not adapt(pristine)
    python -m tools.safetensors_suite --list     # the tests expected not to pass, with reasons

Where they come from: huggingface/safetensors, ``bindings/python/tests/``, at commit
:data:`PIN`, the commit nearest the 0.8.0 release (its ``py_src/safetensors/*.py`` are 0.8.0's
byte for byte; only docstrings of ``__init__.pyi`` differ).  The files of :data:`FILES` are
committed verbatim under ``tests/safetensors_upstream/pristine/`` (Apache-2.0, as upstream)
and, adapted, beside it; nothing is fetched at test time.  The files of :data:`LEFT_OUT` are
not taken, each for the reason given.

The adaptation is mechanical and only touches imports (:func:`adapt`): each ``from
safetensors... import`` statement is replaced, name by name, by :data:`NAMES`: safetensors'
``safe_open`` is ``reference.safe_open``, its ``numpy`` and ``torch`` modules are
``reference.numpy`` and ``reference.torch``, ``SafetensorError`` is ``reference.FormatError``,
two private helpers are their public counterparts here, and the names the project does not
have come from ``safetensors_absent.py`` (objects that fail when used).  A header naming the
source is added.  Test bodies are unchanged.

What is expected not to pass is listed here, with the reason, in :data:`NOT_CLAIMED` (tests of
safetensors' own bytes and internals: skipped) and :data:`DIFFERENCES` (behaviour the project
changes on purpose: expected to fail, strictly, so that a difference that goes away is
noticed); ``docs/reference/torch.md`` has the same table.  Every other test must pass;
``tests/safetensors_upstream/conftest.py`` applies the lists.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence

from tools import ROOT

#: huggingface/safetensors at the commit the tests are taken from.
PIN = "24b0b2857fef49be734b9ab72ce97c09bb25f5b9"
UPSTREAM = "huggingface/safetensors"
UPSTREAM_DIR = "bindings/python/tests"

HERE = ROOT / "tests" / "safetensors_upstream"
PRISTINE = HERE / "pristine"

#: The upstream test files taken, verbatim, then adapted.
FILES = (
    "test_handle.py",
    "test_multithreaded.py",
    "test_pread_backend.py",
    "test_pt_comparison.py",
    "test_pt_model.py",
    "test_simple.py",
    "test_threadable.py",
)

#: The upstream test files not taken.
LEFT_OUT = {
    "test_flax_comparison.py": "JAX/Flax: not a framework reference serves",
    "test_mlx_comparison.py": "MLX: not a framework reference serves",
    "test_paddle_comparison.py": "Paddle: not a framework reference serves",
    "test_tf_comparison.py": "TensorFlow: not a framework reference serves",
}

_ABSENT = "safetensors_absent"
_NUMPY = ("load", "load_file", "save", "save_file")
_TORCH = ("load", "load_file", "save", "save_file", "load_model", "save_model")

#: ``(safetensors module, name)`` -> ``(module here, name here)``.
NAMES: dict[tuple[str, str], tuple[str, str]] = {
    ("safetensors", "safe_open"): ("reference", "safe_open"),
    ("safetensors", "SafetensorError"): ("reference", "FormatError"),
    ("safetensors", "TensorSpec"): (_ABSENT, "TensorSpec"),
    ("safetensors", "serialize"): (_ABSENT, "serialize"),
    ("safetensors", "serialize_file"): (_ABSENT, "serialize_file"),
    ("safetensors", "_safe_open_handle"): (_ABSENT, "_safe_open_handle"),
    **{("safetensors.numpy", n): ("reference.numpy", n) for n in _NUMPY},
    **{("safetensors.torch", n): ("reference.torch", n) for n in _TORCH},
    ("safetensors.torch", "_find_shared_tensors"): ("reference.torch", "shared_groups"),
    ("safetensors.torch", "_remove_duplicate_names"): ("reference.torch", "duplicate_names"),
    ("safetensors.torch", "_end_ptr"): (_ABSENT, "_end_ptr"),
    ("safetensors.torch", "_is_complete"): (_ABSENT, "_is_complete"),
    ("safetensors.torch", "storage_ptr"): (_ABSENT, "storage_ptr"),
    ("safetensors.torch", "storage_size"): (_ABSENT, "storage_size"),
}

_BYTES = "safetensors' own file bytes (its header, its 8-byte alignment): AWQ-v2 is another format"
_PRIVATE = (
    "safetensors' private helper {}: not part of reference.torch (what it has instead is "
    "tested in tests/test_torch.py)"
)
_HANDLE = "_safe_open_handle (safe_open over a Python file object) is safetensors' own"
_FOREIGN = "a safetensors file written by hand; safe_open here refuses it as not AWQ-v2"
_REGISTRY = "not in the registry [ENT-4]: AWQ-v2 cannot store it"

#: Tests of what the project does not claim: skipped, with the reason.
NOT_CLAIMED: dict[str, str] = {
    "test_simple.py::TestCase::test_serialization": _BYTES,
    "test_simple.py::TestCase::test_deserialization": _FOREIGN + " (load)",
    "test_simple.py::TestCase::test_deserialization_metadata": _FOREIGN,
    "test_simple.py::TestCase::test_serialization_forces_alignment": _BYTES,
    "test_simple.py::TestCase::test_serialization_metadata": _BYTES,
    "test_simple.py::TestCase::test_serialization_no_big_endian": _BYTES,
    "test_simple.py::TestCase::test_pt_sf_save_model_overlapping_storage": _PRIVATE.format(
        "storage_ptr and storage_size"
    ),
    "test_simple.py::ReadmeTestCase::test_exception": "safetensors' serialize and TensorSpec",
    "test_pt_comparison.py::TorchTestCase::test_serialization": _BYTES,
    "test_pt_comparison.py::TorchTestCase::test_in_memory": _BYTES,
    "test_pt_model.py::TorchModelTestCase::test_is_complete": _PRIVATE.format("_is_complete"),
    "test_pt_model.py::TorchModelTestCase::test_end_ptr": _PRIVATE.format("_end_ptr"),
    "test_pt_model.py::TorchModelTestCase::test_save": "the payload at byte 192 of " + _BYTES,
    "test_pread_backend.py::PreadBackendTests::test_truncated_header_is_rejected": (
        "cuts the file by safetensors' 8-byte header length (tests/test_safe_open_truncated.py "
        "cuts AWQ-v2 files)"
    ),
    "test_pread_backend.py::PreadBackendTests::test_data_offset_overflow_is_rejected": _FOREIGN,
    "test_handle.py::ReadmeTestCase::test_numpy_example": _HANDLE,
    "test_handle.py::ReadmeTestCase::test_fsspec": _HANDLE,
    "test_threadable.py::TestCase::test_serialize_file_releases_gil": (
        "safetensors' serialize_file and TensorSpec"
    ),
}

#: Tests of behaviour the project changes on purpose: expected to fail, with the reason.
DIFFERENCES: dict[str, str] = {
    "test_simple.py::ReadmeTestCase::test_numpy_slice": (
        "NumPy get_slice: an int out of range is an IndexError and a slice past the end is "
        "cut, as NumPy does (safetensors: SafetensorError); the messages differ"
    ),
    "test_simple.py::ErrorsTestCase::test_file_not_found": (
        "the FileNotFoundError's message is the OS's ([Errno 2] ...), not safetensors' text"
    ),
    "test_pt_comparison.py::TorchTestCase::test_odd_dtype": "complex64 (C64): " + _REGISTRY,
    "test_pt_comparison.py::TorchTestCase::test_complex": "complex64 (C64): " + _REGISTRY,
    "test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_e8m0": "F8_E8M0: " + _REGISTRY,
    "test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_fnuz": (
        "F8_E4M3FNUZ and F8_E5M2FNUZ: " + _REGISTRY
    ),
    "test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp4": (
        "F4 (float4_e2m1fn_x2) and F8_E8M0: " + _REGISTRY
    ),
    "test_pt_comparison.py::TorchTestCase::test_sparse": (
        "the message differs: a TorchSaveError, code TORCH_SPARSE (a ValueError, as there)"
    ),
    "test_pt_comparison.py::TorchTestCase::test_bogus": (
        "the messages differ: TorchSaveErrors, codes TORCH_NOT_A_TENSOR and TORCH_NOT_A_DICT "
        "(ValueErrors, as there)"
    ),
    "test_pt_model.py::TorchModelTestCase::test_remove_duplicate_names": (
        "duplicate_names lets a lone tensor that covers part of its storage be saved (its own "
        "bytes); safetensors refuses it"
    ),
}


def adapt(name: str, source: str) -> str:
    """The adapted text of upstream test file ``name``: every ``from safetensors...``
    import replaced by the imports :data:`NAMES` gives, under a header naming the source."""
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):  # imports inside functions too
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "safetensors" for a in node.names
        ):
            raise ValueError(f"{name}:{node.lineno}: 'import safetensors...' has no mapping")
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("safetensors")):
            continue
        assert node.end_lineno is not None
        replaced = []
        for alias in node.names:
            key = (node.module or "", alias.name)
            if key not in NAMES:
                raise ValueError(f"{name}:{node.lineno}: no mapping for {key}")
            module, here = NAMES[key]
            local = alias.asname or alias.name
            suffix = f" as {local}" if local != here else ""
            replaced.append(f"{' ' * node.col_offset}from {module} import {here}{suffix}\n")
        edits.append((node.lineno - 1, node.end_lineno, "".join(replaced)))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    header = (
        f"# Adapted from {UPSTREAM} {UPSTREAM_DIR}/{name} at {PIN}\n"
        "# (Apache-2.0) by tools/safetensors_suite.py, imports only: do not edit, regenerate.\n"
    )
    return header + "".join(lines)


def expected(name: str) -> str:
    """The adapted file of upstream ``name``, from its pristine copy."""
    return adapt(name, (PRISTINE / name).read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.safetensors_suite", description=__doc__.split("\n\n")[0]
    )
    checked = "write nothing; exit 1 naming each adapted file that is stale"
    parser.add_argument("--check", action="store_true", help=checked)
    listed = "print the tests not expected to pass, each with its reason"
    parser.add_argument("--list", action="store_true", help=listed)
    args = parser.parse_args(argv)
    if args.list:
        for title, table in (("not claimed (skipped)", NOT_CLAIMED),
                             ("differences (expected to fail)", DIFFERENCES)):  # fmt: skip
            print(f"{title}: {len(table)}")
            for test, reason in table.items():
                print(f"  {test}: {reason}")
        return 0
    stale = []
    for name in FILES:
        target = HERE / name
        text = expected(name)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not args.check:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if args.check and stale:
        for name in stale:
            print(f"stale: tests/safetensors_upstream/{name} (python -m tools.safetensors_suite)",
                  file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
