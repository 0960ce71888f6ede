"""``awq2-convert SRC DST`` (also ``python -m reference.convert``): convert an AWQ v1 or
compressed-tensors checkpoint to AWQ-v2, or reshard an AWQ-v2 model.

SRC is an AutoAWQ checkpoint folder (``config.json`` or ``quant_config.json``, and
``model.safetensors`` or shards with ``model.safetensors.index.json``), an llm-compressor
``pack-quantized`` checkpoint folder (``config.json`` with ``quant_method:
"compressed-tensors"``) [CT-1], or a single ``.safetensors`` file with its ``config.json``
beside it.  A checkpoint with no quantised layer is refused (``NOT_QUANTISED``) [CONV-4].

SRC may also be an AWQ-v2 model: a file, a model folder (``model.awq2`` or a set), a split
set or a rank set (:mod:`reference.sources.awq2`; a rank set's shards joined back by
:class:`reference.sets.tpsplit.RankJoin`).  Any layout then becomes any other (a single file,
a split set, a rank set of any T), byte-identical to converting the original checkpoint: the
stored provenance is carried over, not replaced.  Such a SRC is validated in full (a set's
SET-8, its members' records of their ranks SET-15 included) and verified (every payload
checksum, every member's SHA-256) before anything is written: a damaged or inconsistent model
is refused, never re-encoded under fresh checksums.  DST never names, holds or joins a file of
SRC (:func:`reference.conversion.guard.source_guard`).
The conversion:

* streams layer by layer: peak memory is about one layer (its v1 tensors, the
  unpacked codes and the Marlin result) plus the index, not the model;
* stores each layer in the Marlin layouts, or in the AWQ v1 layouts when it breaks
  Marlin's shape rules [LAY-8] (such layers are listed in the summary), and keeps
  ``modules_to_not_convert`` (compressed-tensors: ``ignore``) and every unquantised tensor
  as it is;
* writes ``config.json``, the quantisation config and the provenance (source file
  names, sizes and SHA-256) into the metadata [META-3];
* validates and verifies the finished file before it is renamed into place, unless
  ``--no-verify``; an interrupted or refused conversion leaves nothing at DST [V1-5, CT-6];
* is deterministic: the same input gives the same bytes [WR-1], with any number of
  ``--jobs`` threads repacking layers (default: the cores this process may use) [CONV-3].

Where it goes: a DST ending in ``.awq2`` is the single file to write; any other DST is a
servable model folder: ``model.awq2`` (or a set), ``config.json`` with ``quant_method:
"awq_v2"``, and the source's other files (:mod:`reference.sets.folder`), published by one
rename [CONV-1, CONV-2].  An existing DST is refused unless it is an empty folder, or
``--overwrite`` is given: then it is replaced once the new output is complete and verified.

Exit status: 0 converted (or planned, with ``--dry-run``), 1 refused (the error code
and the reason are printed; nothing is written), 2 usage error, 3 I/O error, 130, 143 or
129 interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP (one line; nothing written, the
partial removed; :mod:`reference.write.publish`).  With ``--json`` every outcome is one JSON
document on stdout: ``{"status": "converted" | "planned" | "refused" | "error" |
"interrupted", "exit_status": N, ...}``, the summary's keys or an ``error`` object.

This module parses the arguments, calls :mod:`reference.conversion` (the plan, the source,
the guard, the run) and prints what comes back; its Python API (:func:`convert`,
:func:`convert_folder`, :func:`make_plan`, :func:`open_source`, :func:`check_paths`, ...) is
that package's, re-exported here.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reference.conversion.guard import check_paths, source_files, source_guard
from reference.conversion.plan import (
    Checkpoint,
    Plan,
    Step,
    make_plan,
    natural_key,
    plan_metadata,
)
from reference.conversion.run import convert, convert_folder, default_jobs, plan_only
from reference.conversion.source import (
    TOKENIZER_FILES,
    SourceCheck,
    has_tokenizer,
    open_source,
)
from reference.conversion.steps import Split, split_plan
from reference.ground.cli import (
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    JsonUsageParser,
    emit_json,
)
from reference.ground.errors import FormatError
from reference.ground.hashing import sha256_of
from reference.ground.text import escape
from reference.sets import folder
from reference.sets.setwriter import parse_size
from reference.sets.tpsplit import KINDS, read_rules
from reference.write import publish
from spec.constants import SET_MANIFEST


def _print_summary(summary: dict[str, Any], *, dry_run: bool) -> None:
    verb = "would write" if dry_run else "wrote"
    members = summary.get("members", ())
    files = f" in {len(members)} files" if len(members) > 1 else ""
    each = " in each rank" if "tp_size" in summary else ""
    print(f"{verb} {escape(str(summary['destination']))}: {summary['file_size']:,} bytes{files}, "
          f"{summary['tensors']} tensors{each}, {summary['layers']} quantised layers "
          f"({summary['marlin_layers']} Marlin)")  # fmt: skip
    if "padding_bytes" in summary:
        pad = summary["padding_bytes"] / max(summary["file_size"], 1)
        print(f"  payload {summary['payload_bytes']:,} B, index {summary['index_bytes']:,} B, "
              f"padding {summary['padding_bytes']:,} B ({pad:.2%})")  # fmt: skip
    elif "payload_bytes" in summary:
        rest = summary["file_size"] - summary["payload_bytes"]
        print(f"  payload {summary['payload_bytes']:,} B; each file's header, index and "
              f"alignment padding {rest:,} B in all")  # fmt: skip
    odd = summary["awq_layout_layers"]
    if odd:
        print(f"  {len(odd)} layers break Marlin's shape rules and keep the AWQ v1 layout (LAY-8):")
        for name in odd:
            print(f"    {escape(name)}")
    if "tp_size" in summary:
        family = summary["tp_rule_family"] or "given by --tp-rules"
        limit = summary.get("max_shard_size")
        each = "" if limit is None else f", each rank in files of at most {limit:,} bytes"
        print(f"  a rank set for tensor parallelism {summary['tp_size']} (rules: {family}){each}, "
              f"listed by {SET_MANIFEST}:")  # fmt: skip
        for m in members:
            print(f"    {escape(m['name'])}  {m['size']:,} bytes")
    elif len(members) > 1:
        print(f"  a set of {len(members)} files of at most {summary['max_shard_size']:,} bytes "
              f"(apart from a single larger layer), listed by {SET_MANIFEST}:")  # fmt: skip
        for m in members:
            print(f"    {escape(m['name'])}  {m['size']:,} bytes")
    if "folder" in summary:
        copied = ", ".join(escape(name) for name in summary["copied"])
        weights = "the set" if len(members) > 1 or "tp_size" in summary else "model.awq2"
        print(f"  folder {escape(summary['folder'])}: {copied} copied beside {weights}")
    if not dry_run:
        print(f"  verified: {'yes' if summary['verified'] else 'no (--no-verify)'}; "
              f"{summary['seconds']} s; peak RSS {summary['peak_rss_mib']} MiB, "
              "mapped file pages included")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = JsonUsageParser(
        prog="awq2-convert",
        description="Convert an AWQ v1 (AutoAWQ GEMM) or compressed-tensors pack-quantized "
        "(llm-compressor W4A16) checkpoint to AWQ-v2. Layers are stored "
        "pre-swizzled in vLLM's Marlin layout; the conversion streams tensor by tensor, so its "
        "own memory is about the largest tensor or layer plus the index, not the model. "
        "The output is validated and every checksum "
        "verified before it is renamed into place; a refused or interrupted conversion leaves "
        "nothing at DST. (python -m reference.convert is the same command.)",
        epilog="exit status: 0 done, 1 refused (nothing written), 2 usage error, 3 I/O error, "
        "130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (nothing written)",
    )
    parser.add_argument(
        "src",
        type=Path,
        help="AWQ v1 or compressed-tensors checkpoint folder or .safetensors "
        "file; or an AWQ-v2 file, model folder, split set or rank set to reshard (the output "
        "is byte-identical to converting the original checkpoint)",
    )
    parser.add_argument("dst", nargs="?",
                        help="a name ending in .awq2: the single file to write; any other name: "
                        "the servable model folder to write (model.awq2 or a set, config.json "
                        "with quant_method awq_v2 and a copy of every other file of SRC except "
                        "the weights). An existing DST is refused unless it is an empty folder "
                        "or --overwrite is given")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing DST file or folder, only once the new "
                        "output is complete and verified (a failure leaves the old one as it "
                        "was)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="threads that repack layers (default: the cores this process may "
                        "use); the output is byte-identical for every N")  # fmt: skip
    parser.add_argument("--max-shard-size", type=_size, default=None, metavar="SIZE",
                        help="with a folder DST: split the weights into files of at most SIZE "
                        "(5GB, 500MB, 2GiB or bytes; KB/MB/GB/TB are powers of 1000) listed by "
                        f"{SET_MANIFEST}; a single layer larger than SIZE gets a file of its "
                        "own; if everything fits in one file, it is model.awq2")  # fmt: skip
    parser.add_argument("--tp", type=int, default=None, metavar="T",
                        help="with a folder DST: write a rank set, one file per "
                        "tensor-parallel rank holding that rank's shard of every layer (column, "
                        "row, head and vocabulary splits as vLLM makes them, from the "
                        "architecture's rule table)")  # fmt: skip
    parser.add_argument("--tp-rules", type=Path, default=None, metavar="FILE",
                        help="with --tp: a JSON list of [pattern, kind] rules tried before the "
                        f"architecture's table (kind: {', '.join(KINDS)}; the pattern "
                        "matches a whole module name)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    parser.add_argument("--no-verify", action="store_true", help="skip the final validation of the "
                        "output (an AWQ-v2 SRC is still validated and verified first)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout whatever the outcome: the "
                        "summary, or the error (its code, message, expected and "
                        "found)")  # fmt: skip
    return parser


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """What the options ask for that cannot be done, or None."""
    if args.dst is None and not args.dry_run:
        return "DST is required unless --dry-run"
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs must be at least 1, got {args.jobs}"
    to_folder = args.dst is not None and folder.is_folder_destination(args.dst)
    if args.max_shard_size is not None and args.dst is not None and not to_folder:
        return "--max-shard-size writes a set, which is a folder: DST must not end in .awq2"
    if args.tp is not None and args.tp < 1:
        return f"--tp must be at least 1, got {args.tp}"
    if args.tp is not None and args.dst is not None and not to_folder:
        return "--tp writes a rank set, which is a folder: DST must not end in .awq2"
    if args.tp_rules is not None and args.tp is None:
        return "--tp-rules needs --tp"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status.  Every outcome is said once: a summary on
    stdout, or one error line (and its details) on stderr; with ``--json``, one JSON document
    on stdout either way."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    assert isinstance(parser, JsonUsageParser)
    parser.json_errors = "--json" in argv
    args = parser.parse_args(argv)
    problem = _usage(parser, args)
    if problem is not None:
        parser.error(problem)
    try:
        tp_rules = [] if args.tp_rules is None else read_rules(args.tp_rules)
    except (OSError, ValueError) as exc:
        parser.error(f"--tp-rules: {exc}")
    report = _Report(json_output=args.json)
    try:
        with publish.interruptible():  # SIGTERM and SIGHUP clean up as Ctrl-C does
            return _run(args, tp_rules, report)
    except (KeyboardInterrupt, publish.Interrupted) as exc:
        where = "" if args.dst is None else f"; nothing was written to {args.dst}"
        return report.error(publish.exit_status(exc),
                            f"interrupted by {publish.signal_name(exc)}{where}",
                            status="interrupted")  # fmt: skip


class _Report:
    """Says the outcome: text on stdout and stderr, or one JSON document on stdout."""

    def __init__(self, *, json_output: bool) -> None:
        self.json = json_output

    def note(self, text: str) -> None:
        """A remark on stderr that is not the outcome (left out of JSON output)."""
        if not self.json:
            print(escape(text), file=sys.stderr)

    def error(self, exit_status: int, message: str, *, status: str = "error") -> int:
        if self.json:
            emit_json({"status": status, "exit_status": exit_status, "error": {"message": message}})
        else:
            print(f"{'' if status == 'interrupted' else 'error: '}{message}", file=sys.stderr)
        return exit_status

    def refused(self, exc: FormatError) -> int:
        if self.json:
            detail = {"code": exc.code, "message": exc.message, "offset": exc.offset,
                      "expected": _jsonable(exc.expected), "found": _jsonable(exc.found),
                      "path": exc.path}  # fmt: skip
            emit_json({"status": "refused", "exit_status": EXIT_REFUSED, "error": detail})
            return EXIT_REFUSED
        print(f"refused: [{exc.code}] {escape(exc.message)}", file=sys.stderr)
        if exc.expected is not None or exc.found is not None:
            print(f"  expected {escape(str(exc.expected))}, found {escape(str(exc.found))}",
                  file=sys.stderr)  # fmt: skip
        if exc.path:
            print(f"  in {escape(exc.path)}", file=sys.stderr)
        return EXIT_REFUSED


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def _run(args: argparse.Namespace, tp_rules: list[tuple[str, str]], report: _Report) -> int:
    to_folder = args.dst is not None and folder.is_folder_destination(args.dst)
    args.dst = None if args.dst is None else Path(args.dst)
    if to_folder and os.path.islink(args.dst):  # a link to a folder elsewhere: publish there
        args.dst = Path(os.path.realpath(args.dst))
    refusal = check_paths(args.src, args.dst, to_folder=to_folder, overwrite=args.overwrite)
    if refusal is not None:
        status, message = refusal
        return report.error(status, message)
    watched = None if args.dst is None else publish.watch(args.dst)  # before SRC is read
    try:
        if args.dst is not None:
            publish.remove_stale(args.dst, report.note)
        if args.dry_run:
            summary = plan_only(args.src, args.dst, tp_size=args.tp, tp_rules=tp_rules)
        else:
            progress = not args.quiet and not args.json and sys.stderr.isatty()
            if to_folder:
                summary = convert_folder(args.src, args.dst, verify=not args.no_verify,
                                         jobs=args.jobs, progress=progress,
                                         max_shard_size=args.max_shard_size, tp_size=args.tp,
                                         tp_rules=tp_rules, overwrite=args.overwrite,
                                         watched=watched)  # fmt: skip
            else:
                summary = convert(args.src, args.dst, verify=not args.no_verify, jobs=args.jobs,
                                  progress=progress, watched=watched)  # fmt: skip
    except FormatError as exc:
        return report.refused(exc)
    except OSError as exc:
        return report.error(EXIT_IO, escape(_said(exc, args.dst)))
    for skipped in summary.get("not_copied", ()):  # said even with --quiet
        report.note(f"not copied: {skipped['name']} ({skipped['reason']})")
    if to_folder and not args.dry_run and not has_tokenizer(Path(args.src)):  # even --quiet
        report.note(f"warning: {args.src} has no tokenizer files ({', '.join(TOKENIZER_FILES)}):"
                    f" {args.dst} serves only prompts given as token ids (vLLM's "
                    "skip_tokenizer_init=True), or with a tokenizer named apart (vLLM's "
                    "--tokenizer, the original model's name or folder)")  # fmt: skip
    if args.json:
        emit_json({"status": "planned" if args.dry_run else "converted", "exit_status": EXIT_OK,
               **summary})  # fmt: skip
    elif not args.quiet:
        _print_summary(summary, dry_run=args.dry_run)
        if args.dry_run:
            for step in summary["plan"]:
                print(f"    {step['layout']:<6} {escape(step['name'])}")
    return EXIT_OK


#: Errors of writing, not of reading: said with DST, never a partial's name or a bare errno.
_WRITING = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def _said(exc: OSError, dst: Path | None) -> str:
    """An I/O error in words: the publishing transaction's own text, a write that failed
    (a full disk, a quota, a read-only file system) named by DST, else the system's text."""
    if isinstance(exc, publish.PublishError) or dst is None or exc.errno not in _WRITING:
        return str(exc)
    return str(publish.named_error(exc, dst, "cannot write the new version beside it"))


def _entry_point() -> int:
    """Console-script entry (``awq2-convert``): like main(), but quiet when stdout is closed
    early (``| head``)."""
    try:
        return main()
    except BrokenPipeError:
        sys.stdout = None  # type: ignore[assignment]  # no flush error at exit
        return EXIT_OK


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "TOKENIZER_FILES",
    "Checkpoint",
    "Plan",
    "SourceCheck",
    "Split",
    "Step",
    "build_parser",
    "check_paths",
    "convert",
    "convert_folder",
    "default_jobs",
    "main",
    "make_plan",
    "natural_key",
    "open_source",
    "plan_metadata",
    "plan_only",
    "sha256_of",
    "source_files",
    "source_guard",
    "split_plan",
]


if __name__ == "__main__":
    sys.exit(_entry_point())
