"""AWQ-v2 reference implementation: read, write, check and explain AWQ-v2 files.

>>> import reference                                    # doctest: +SKIP
>>> reference.save("tiny.awq2", {"w": np.zeros((2, 3), np.float16)})
>>> with reference.open("tiny.awq2") as f:
...     f.tensor("w")

The format itself is defined by the ``spec`` package and the published spec;
this package cites requirement ids (``[HDR-4]``) instead of restating rules.
"""

from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import (
    ChecksumError,
    EntryError,
    FormatError,
    HeaderError,
    IndexCorruptError,
    LegacyError,
    LimitError,
    MetadataError,
    PaddingError,
    RefusedError,
    SetError,
    TensorNameError,
    TensorNotFoundError,
    TrailerError,
    TruncatedError,
    VersionError,
)
from reference.ground.version import VERSION
from reference.opener import open  # noqa: A004  (reference.open, like io.open)
from reference.safeopen import safe_open
from reference.sets.fileset import FileSet
from reference.write.writer import Writer, WriterStateError, save

__version__ = VERSION  # one source: pyproject.toml

__all__ = [
    "ChecksumError",
    "EntryError",
    "FileSet",
    "FormatError",
    "HeaderError",
    "IndexCorruptError",
    "LegacyError",
    "LimitError",
    "MetadataError",
    "PaddingError",
    "Reader",
    "RefusedError",
    "SetError",
    "TensorInfo",
    "TensorNameError",
    "TensorNotFoundError",
    "TrailerError",
    "TruncatedError",
    "VersionError",
    "Writer",
    "WriterStateError",
    "open",
    "safe_open",
    "save",
]
