"""The coverage-guided fuzzing drivers (tools.fuzz.libfuzzer, tools.fuzz.atheris_reader) and
the C coverage table (tools.c_coverage): their parsing, and the libFuzzer target over every
vector when clang is there (CI installs it before the tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import c_coverage
from tools.fuzz import libfuzzer

# A libFuzzer run's last lines, as libFuzzer 14 prints them (-print_final_stats=1).
LIBFUZZER_TAIL = """\
#7748\tREDUCE cov: 571 ft: 1655 corp: 192/77Mb lim: 1114112 exec/s: 430 rss: 420Mb L: 3/9
#7989\tDONE   cov: 572 ft: 1660 corp: 192/77Mb lim: 1114112 exec/s: 319 rss: 420Mb
Done 7989 runs in 25 second(s)
stat::number_of_executed_units: 7989
stat::average_exec_per_sec:     319
stat::new_units_added:          107
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              420
"""


def test_parse_reads_the_final_stats_and_the_last_coverage_line() -> None:
    stats = libfuzzer.parse(LIBFUZZER_TAIL, libfuzzer.Stats())
    assert (stats.executions, stats.exec_per_sec, stats.new_units, stats.peak_rss_mb) == (
        7989,
        319,
        107,
        420,
    )
    assert (stats.cov, stats.ft) == (572, 1660)  # the DONE line, not the REDUCE before it


def test_crashes_are_the_artifacts_libfuzzer_names(tmp_path: Path) -> None:
    for name in ("crash-1a", "leak-2b", "timeout-3c", "oom-4d", "libfuzzer.log", "seed"):
        (tmp_path / name).write_bytes(b"x")
    assert libfuzzer.crashes_in(tmp_path) == ("crash-1a", "leak-2b", "oom-4d", "timeout-3c")


def test_max_len_leaves_room_past_the_largest_vector() -> None:
    largest = max(p.stat().st_size for p in libfuzzer.vectors())
    assert libfuzzer.max_len() == largest + 65536
    assert len(libfuzzer.vectors()) > 100


def test_gcov_lines_and_unreached_rejections() -> None:
    text = [
        "        -:    0:Source:reader.c",
        "        -:   10:/* a comment */",
        "       12:   11:    if (crc != f->header_crc)",
        '    #####:   12:        return awq2_fail(err, "TRAILER_MISMATCH", 8, "differs");',
        '        3*:   13:    x = awq2_fail(err, "BAD_MAGIC", 0, "m");',
        "    #####:   14:    free(v);",
    ]
    cov = c_coverage.FileCoverage("reader.c")
    for line in text:
        m = c_coverage._GCOV_LINE.match(line)
        assert m is not None, line
        if m.group(1) != "-" and int(m.group(2)):
            count = m.group(1).rstrip("*")
            cov.counts[int(m.group(2))] = 0 if count == "#####" else int(count)
            cov.text[int(m.group(2))] = m.group(3)
    assert (cov.lines, cov.covered) == (4, 2)
    sites = c_coverage.unreached_rejections({"reader.c": cov})
    assert len(sites) == 1 and sites[0].startswith("reader.c:12: TRAILER_MISMATCH: return")
    assert "total" in c_coverage.table({"reader.c": cov}, {"reader.c": cov}).splitlines()[-1]


def _clang_has_libfuzzer() -> bool:
    return shutil.which(libfuzzer.clang()) is not None


@pytest.mark.skipif(
    not _clang_has_libfuzzer() and not os.environ.get("AWQ2_REQUIRE_CLANG"),
    reason="no clang on PATH (CI installs it)",
)
def test_libfuzzer_target_runs_every_vector_and_a_few_mutants(tmp_path: Path) -> None:
    """Every vector through the target once (-runs=0 runs the seeds only), then 300 mutants
    from the checksum-refreshing mutator: no sanitizer report, no crash."""
    binary = libfuzzer.build(tmp_path / "awq2c-fuzz")
    seeds = libfuzzer.seed_folder(tmp_path / "seeds")
    common = [f"-max_len={libfuzzer.max_len()}", "-len_control=0", f"-artifact_prefix={tmp_path}/"]
    for runs in ("-runs=0", "-runs=300"):
        done = subprocess.run(
            [str(binary), runs, "-seed=1", *common, str(seeds)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "INITED" in done.stderr
    assert libfuzzer.crashes_in(tmp_path) == ()


# ----------------------------------------------------------------- lookups the coverage showed


def test_lazy_lookup_in_a_bucket_holding_another_buckets_entry() -> None:
    """n_entry_outside_its_bucket opened without validation: the bucket before the moved
    bound now spans an entry whose hash puts it in the next bucket. Looking up a name of that
    earlier bucket reads that entry inside its range: IDX-8 (an entry's bucket is its hash's)
    rejects it, BAD_ENTRY_ORDER; the moved entry's own lookup sees its bucket's neighbour
    in its own bucket: IDX-9, BAD_BUCKET_TABLE."""
    import reference
    from spec.algorithms import bucket_of, fnv1a_64

    path = libfuzzer.MANIFEST.parent / "vectors" / "n_entry_outside_its_bucket.awq2"
    names = [f"layer.{i}.w" for i in range(100)]  # the "many" base (tools/vectors/generate.py)
    reader = reference.open(path)
    try:
        codes = set()
        for name in names:
            try:
                reader.tensor(name)
            except reference.FormatError as exc:
                codes.add(exc.code)
            except KeyError:
                pass
        assert {"BAD_ENTRY_ORDER", "BAD_BUCKET_TABLE"} <= codes
        assert "\ud800" not in reader  # a name no file can hold (not UTF-8): absent
    finally:
        reader.close()
    assert len({bucket_of(fnv1a_64(n.encode()), 7) for n in names}) > 1  # several buckets
