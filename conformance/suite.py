"""A conformance suite on disk: its manifest, and the check that its files are the listed ones.

A suite is a folder holding ``manifest.json``, ``vectors/`` and ``schema/`` (the installed
package folder, a clone's ``conformance/``, or the published archive unpacked).  A vector is a
file (``file``, ``size``, ``sha256``) or, for a file set, a folder (``folder``, and
``folder_files``: the name, size and sha256 of each file in it).  Before a loader runs,
:func:`problems` checks every file the manifest lists, each vector's file or files and each
entry of ``files`` (the schemas), against its listed size and sha256, as a regular file (not a
link), and that ``vectors/`` and each vector folder hold nothing unlisted; a file listed more
than once is still read and hashed once.  A suite is data from outside: the manifest is read
bounded in size and, before it is parsed, in depth, its paths must name a file directly under
``vectors/`` or ``schema/`` or a folder directly under ``vectors/``, names in a folder are
plain names, and nothing outside the suite's folder is opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from conformance import exactjson

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 3
#: A manifest larger than this is refused unread (the committed one is under 1 MiB).
MANIFEST_LIMIT = 64 << 20
#: The paths a manifest may list: one plain name directly under one of the suite's folders.
_PATH = re.compile(r"^(vectors|schema)/[A-Za-z0-9][A-Za-z0-9._-]*$")
_FOLDER = re.compile(r"^vectors/[A-Za-z0-9][A-Za-z0-9._-]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: How many offending files a message names before it counts the rest.
SHOWN = 5


class SuiteError(ValueError):
    """The suite cannot be used: the message names the files and what was expected."""


@dataclass(frozen=True)
class Listed:
    """One file the manifest lists: its path under the suite, size and sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Suite:
    root: Path
    manifest: dict[str, Any]

    @property
    def versions(self) -> dict[str, str]:
        """The suite's own version and the spec version it tests, as the manifest gives them."""
        return {k: str(self.manifest[k]) for k in ("suite_version", "spec_version")}

    def listed(self) -> list[Listed]:
        """Every file of the suite but the manifest: the vectors' files, then ``files``."""
        vectors = [item for v in self.manifest["vectors"] for item in vector_files(v)]
        return vectors + [Listed(f["path"], f["size"], f["sha256"]) for f in self.manifest["files"]]


def vector_files(vector: dict[str, Any]) -> list[Listed]:
    """The files of one vector: its file, or every file of its folder (a file set)."""
    if "folder" in vector:
        return [
            Listed(f"{vector['folder']}/{f['name']}", f["size"], f["sha256"])
            for f in vector["folder_files"]
        ]
    return [Listed(vector["file"], vector["size"], vector["sha256"])]


def vector_path(vector: dict[str, Any]) -> str:
    """What a loader is given, relative to the suite: the vector's file or folder."""
    return str(vector.get("folder") or vector["file"])


def load(root: Path) -> Suite:
    """The suite in folder ``root``, its manifest read and its structure checked."""
    path = root / MANIFEST_NAME
    try:
        with open(path, "rb") as f:
            raw = f.read(MANIFEST_LIMIT + 1)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read the manifest: {exc.strerror}") from exc
    if len(raw) > MANIFEST_LIMIT:
        raise SuiteError(f"{path}: larger than {MANIFEST_LIMIT >> 20} MiB; not a manifest")
    try:  # the depth before any parse: deep nesting exhausts the parser's recursion
        exactjson.check_depth(raw)
    except ValueError as exc:
        raise SuiteError(f"{path}: {exc}; not a manifest") from exc
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
        exact = exactjson.loads(text)
    except ValueError as exc:
        raise SuiteError(f"{path}: not a JSON document ({exc})") from exc
    _check_structure(doc, path)
    for vector, written in zip(doc["vectors"], exact["vectors"], strict=True):
        if "content" in vector:  # the expected metadata with its numbers as written [ADP-1]
            vector["content"] = written["content"]
    return Suite(root, doc)


def _check_structure(doc: Any, path: Path) -> None:
    if not isinstance(doc, dict) or doc.get("manifest_version") != MANIFEST_VERSION:
        found = doc.get("manifest_version") if isinstance(doc, dict) else type(doc).__name__
        raise SuiteError(
            f"{path}: manifest_version expected {MANIFEST_VERSION}, found {found!r} "
            "(a suite from another version of the runner?)"
        )
    for key in ("suite_version", "spec_version"):
        if not isinstance(doc.get(key), str):
            raise SuiteError(f"{path}: {key} expected a string, found {doc.get(key)!r}")
    for key, path_key in (("vectors", "file"), ("files", "path")):
        items = doc.get(key)
        if not isinstance(items, list):
            raise SuiteError(f"{path}: {key} expected a list")
        for number, item in enumerate(items):
            if key == "vectors" and isinstance(item, dict) and "folder" in item:
                if not _folder_ok(item):
                    raise SuiteError(
                        f"{path}: vectors[{number}] expected folder (a name under vectors/) "
                        "and folder_files (a list of name, size and sha256, the names plain "
                        "and different)"
                    )
            elif not _listed_ok(item, path_key, _PATH):
                raise SuiteError(
                    f"{path}: {key}[{number}] expected {path_key} (a name under vectors/ or "
                    "schema/), size (an integer) and sha256 (64 lowercase hex digits)"
                )
    ids = [v.get("id") for v in doc["vectors"]]
    if not all(isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
        raise SuiteError(f"{path}: vector ids expected unique strings")
    given: dict[str, str] = {}  # each vector its own file or folder: a loader runs once a path
    for v in doc["vectors"]:
        where = str(v.get("folder") or v.get("file"))
        if where in given:
            raise SuiteError(f"{path}: vectors {given[where]!r} and {v['id']!r} are both "
                             f"{where!r}; expected each vector's own file or folder")  # fmt: skip
        given[where] = v["id"]
    for v in doc["vectors"]:
        if not _verdict_ok(v):
            raise SuiteError(
                f"{path}: vector {v['id']!r} expected expect (accept, reject or either), "
                "requirements (a list), error_code for a reject, either_codes for an either, "
                "and content (an object) for an accept or an either"
            )


def _verdict_ok(v: dict[str, Any]) -> bool:
    """The fields the runner judges by are there, with their types."""
    expect = v.get("expect")
    return (
        expect in ("accept", "reject", "either")
        and isinstance(v.get("requirements"), list)
        and (expect != "reject" or isinstance(v.get("error_code"), str))
        and (expect != "either" or isinstance(v.get("either_codes"), list))
        and (expect == "reject" or isinstance(v.get("content"), dict))
    )


def _folder_ok(item: dict[str, Any]) -> bool:
    files = item.get("folder_files")
    return (
        isinstance(item.get("folder"), str)
        and _FOLDER.match(item["folder"]) is not None
        and isinstance(files, list)
        and all(_listed_ok(f, "name", _NAME) for f in files)
        and len({f["name"] for f in files}) == len(files)
    )


def _listed_ok(item: Any, path_key: str, pattern: re.Pattern[str]) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get(path_key), str)
        and pattern.match(item[path_key]) is not None
        and type(item.get("size")) is int
        and item["size"] >= 0
        and isinstance(item.get("sha256"), str)
        and _SHA256.match(item["sha256"]) is not None
    )


def problems(suite: Suite) -> list[str]:
    """What is wrong with the suite's files, one line per file; empty when all is as listed.
    Each file is opened and hashed once, however many listings name it, so that the work is
    bounded by the suite's bytes, not by the manifest's length."""
    found = []
    listed = suite.listed()
    by_path: dict[str, list[Listed]] = {}
    for item in listed:
        by_path.setdefault(item.path, []).append(item)
    for path, items in by_path.items():
        for item, why in zip(items, _problems(suite.root / path, items), strict=True):
            if why:
                found.append(f"{item.path}: {why}")
    names = {item.path for item in listed}
    folders = {v["folder"] for v in suite.manifest["vectors"] if "folder" in v}
    top = suite.root / "vectors"
    for name in sorted(os.listdir(top)) if top.is_dir() else []:
        path = f"vectors/{name}"
        if path in folders:
            found += _folder_problems(suite.root, path, names)
        elif path not in names:
            found.append(f"{path}: not listed in the manifest")
    return found


def _folder_problems(root: Path, folder: str, names: set[str]) -> list[str]:
    """A vector's folder must be a folder (not a link) holding only the listed files."""
    mode = os.lstat(root / folder).st_mode
    if not stat.S_ISDIR(mode):
        return [f"{folder}: not a folder"]
    return [
        f"{folder}/{name}: not listed in the manifest"
        for name in sorted(os.listdir(root / folder))
        if f"{folder}/{name}" not in names
    ]


class NotRegularFile(OSError):
    """A suite's file that is a link, a FIFO, a device or a folder."""


def open_file(path: Path) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, neither following a link nor
    waiting on a FIFO; ``FileNotFoundError``, :class:`NotRegularFile` or ``OSError`` else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise NotRegularFile(f"{path}: not a regular file")
    return f


def sha256_of(f: BinaryIO) -> str:
    """The hex SHA-256 of the rest of ``f``, read 1 MiB at a time."""
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _problems(path: Path, items: list[Listed]) -> list[str]:
    """Why ``path`` is not each of the listings ``items`` (all of that path), or ``""`` for
    one it matches; the file is opened once and hashed at most once."""
    f = _opened(path)
    if isinstance(f, str):
        return [f] * len(items)
    with f:
        size = os.fstat(f.fileno()).st_size
        found = sha256_of(f) if any(item.size == size for item in items) else ""
    return [
        f"size expected {item.size} bytes, found {size}"
        if item.size != size
        else ("" if found == item.sha256 else f"sha256 expected {item.sha256}, found {found}")
        for item in items
    ]


def _opened(path: Path) -> BinaryIO | str:
    """``path`` opened as a suite's file, or why it cannot be."""
    if path.parent.name != "vectors" and path.parent.is_symlink():  # a vector's folder
        return "in a folder that is a link"
    try:
        return open_file(path)
    except FileNotFoundError:
        return "missing"
    except NotRegularFile:
        return "not a regular file"
    except OSError as exc:
        return f"cannot be opened as a regular file ({exc.strerror})"


def refusal(found: list[str]) -> str:
    """The message for a suite whose files differ: the first few and the count."""
    shown = "\n".join(f"  {line}" for line in found[:SHOWN])
    more = f"\n  ... and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (
        f"the suite's files are not the ones its manifest lists ({len(found)} "
        f"{'file' if len(found) == 1 else 'files'}); nothing was run:\n{shown}{more}"
    )
