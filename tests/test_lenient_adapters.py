"""Deliberately wrong adapters fail the vectors made for their mistake [ADP-1, ADP-2, ENT-5].

Each adapter is the reference adapter (``conformance.adapters.reference``) with one classic
mistake of a loader written with a general-purpose JSON library or with binary64 numbers
(JavaScript's ``JSON.parse``/``JSON.stringify`` and ``Number``), written to a temporary file
and run through ``python -m conformance.run``.  The vectors each must fail are worked out
here from the spec, not from a run:

(a) metadata parsed by plain ``json.loads`` (duplicate keys: the last wins; ``NaN`` and
    ``1e400`` read as floats; lone surrogates kept; numbers of any length) and printed again
    by ``json.dumps`` (each number as Python spells its value);
(b) sizes computed in binary64 (each dim a double, the product rounded at every step) and
    dims printed as the integer value of that double, as ``JSON.stringify`` of a ``Number``
    prints it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conformance import run

pytestmark = pytest.mark.slow  # three runs of the runner over 40 vectors: about a minute

#: Every vector the two adapters are run on: the metadata and the 64-bit vectors, with a
#: few ordinary ones that both must still pass.
SUBSET = (
    r"^(y_sample|y_metadata_.*|y_unicode_names|y_dim.*|n_metadata_.*|n_dim.*|n_shape.*"
    r"|n_misaligned.*|n_payload_end_wraps|n_index_.*)$"
)

LENIENT_JSON = """
import json, sys
import reference.format.metadata as metadata
from conformance.adapters import reference as adapter


class PlainJson:  # the reference's strict hooks dropped: plain json.loads
    @staticmethod
    def loads(text, **hooks):
        return json.loads(text)


metadata.json = PlainJson
metadata._no_lone_surrogates = lambda document: None
adapter._metadata_as_written = lambda f: f.metadata  # the parsed values, printed again
try:
    doc = adapter.describe(sys.argv[1])
except Exception:  # a reject or a crash: the adapter's own paths say which
    sys.exit(adapter.main(sys.argv[1:]))
print(json.dumps(doc))
"""

DOUBLE_SIZES = """
import math, sys
from reference.format import rules
from conformance.adapters import reference as adapter

rules.element_count = lambda shape: math.prod(float(d) for d in shape)  # binary64 at each step
describe = adapter.describe


def printed_as_doubles(path):
    doc = describe(path)
    for tensor in doc["tensors"]:  # JSON.stringify(Number(dim))
        tensor["shape"] = [int(float(d)) for d in tensor["shape"]]
    return doc


adapter.describe = printed_as_doubles
sys.exit(adapter.main(sys.argv[1:]))
"""


def _failures(tmp_path: Path, name: str, script: str | None) -> set[str]:
    """Run the subset with the adapter ``script`` (None: the reference); the failing ids."""
    if script is None:
        loader = f"{name}={run.REFERENCE_LOADER}"
    else:
        path = tmp_path / f"{name}.py"
        path.write_text(script, encoding="utf-8")
        loader = f"{name}={sys.executable} {path} {{file}}"
    report = tmp_path / f"{name}.json"
    status = run.main(["--loader", loader, "--only", SUBSET, "--quiet",
                       "--report-json", str(report)])  # fmt: skip
    outcomes = json.loads(report.read_text(encoding="utf-8"))["outcomes"]
    assert len(outcomes) >= 35, "the subset lost its vectors"
    failed = {o["vector"] for o in outcomes if not o["passed"]}
    assert status == (1 if failed else 0)
    return failed


def test_the_reference_adapter_passes_the_subset(tmp_path):
    """The correct adapter, numbers as written [ADP-1, ADP-2]: nothing fails."""
    assert _failures(tmp_path, "reference", None) == set()


def test_a_lenient_json_parser_fails_the_metadata_vectors(tmp_path):
    expected = {
        # -0 prints as 0, 1E5 as 100000.0, 1e-400 as 0.0, 1.0000000000000001 as 1.0 [ADP-1]
        "y_metadata_exact_numbers",
        # plain json.loads keeps the last of two equal keys, escaped or not [META-2]
        "n_metadata_duplicate_key",
        "n_metadata_duplicate_empty_key",
        "n_metadata_escaped_duplicate_key",
        # NaN and 1e400 read as floats: accepted, printed as NaN / Infinity, which is no JSON
        "n_metadata_nan",
        "n_metadata_number_overflow",
        # a number that rounds to infinity (nearest, ties to even) reads as inf: accepted; the
        # largest finite one prints in Python's form, not as written [META-5, ADP-1]
        "n_metadata_rounds_to_infinity",
        "y_metadata_largest_finite",
        # a number of 101 bytes (also when 'e+' makes it so), and a lone high or low
        # surrogate escape, accepted [META-5]
        "n_metadata_number_too_long",
        "n_metadata_number_exponent_too_long",
        "n_metadata_lone_surrogate",
        "n_metadata_lone_low_surrogate",
    }
    # not failed: y_metadata_escapes (strings compare after unescaping, any escaping is fine),
    # n_metadata_bom, n_metadata_not_json, n_metadata_trailing_comma,
    # n_metadata_control_character (json.loads refuses them too), y_metadata_feff_in_string,
    # n_metadata_deep_and_malformed (the depth is measured before parsing).
    assert _failures(tmp_path, "lenient", LENIENT_JSON) == expected


def test_sizes_in_doubles_fail_the_64_bit_vectors(tmp_path):
    expected = {
        # 2**53 + 1 prints as 9007199254740992 [ADP-2]
        "y_dim_2p53_plus_1",
        # 2**63 - 1 becomes 2**63: a valid file refused [ENT-5]
        "y_dim_u8_2p63_minus_1",
        # 2**62 - 1 becomes 2**62, times 2 is 2**63: refused
        "y_dim_f16_2p62_minus_1",
        # 3 x double((2**63 - 1) // 3) rounds to 2**63: refused
        "y_dims_u8_3_by_third",
        # accepted, but the dim prints rounded [ADP-2]
        "y_dims_u8_103_below_2p63",
        # 103 x 89547301328687144 = 2**63 + 24, binary64 gives 2**63 - 1024: accepted [ENT-5]
        "n_dims_u8_103_rounds_below_2p63",
    }
    # not failed: the products that reach 2**63 or wrap in u64 are >= 2**63 in binary64 too;
    # offsets are not sized by this adapter.
    assert _failures(tmp_path, "doubles", DOUBLE_SIZES) == expected
