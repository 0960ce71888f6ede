"""The error classes of the reference implementation.

Every reader failure is a :class:`FormatError` subclass carrying one stable
``code`` from :data:`spec.registry.ERROR_CODES` [RD-3], the file ``offset`` of
the offending bytes, and what was ``expected`` and ``found``.  The class of each
code is fixed by the registry, so :func:`error` (and the helpers for the shapes that
repeat: :func:`field_error`, :func:`over_limit`, :func:`checksum_mismatch`) is the only way
code in this package raises one.
"""

from __future__ import annotations

from typing import Any

from spec.registry import ERROR_BY_CODE


class FormatError(ValueError):
    """A file that is not valid AWQ-v2 (or not a readable AWQ v1 checkpoint)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        offset: int | None = None,
        expected: Any = None,
        found: Any = None,
        path: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.offset = offset
        self.expected = expected
        self.found = found
        self.path = path
        registered = ERROR_BY_CODE.get(code)
        self.requirements: tuple[str, ...] = registered.requirements if registered else ()
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" at offset {self.offset} (0x{self.offset:x})" if self.offset is not None else ""
        detail = ""
        if self.expected is not None or self.found is not None:
            detail = f": expected {self.expected}, found {self.found}"
        return f"[{self.code}]{where} {self.message}{detail}"

    def to_dict(self) -> dict[str, Any]:
        """Stable keys for ``--json`` output and the conformance adapter."""
        return {
            "code": self.code,
            "offset": self.offset,
            "message": self.message,
            "expected": None if self.expected is None else str(self.expected),
            "found": None if self.found is None else str(self.found),
            "requirements": list(self.requirements),
        }


class TruncatedError(FormatError, EOFError):
    """The file ends before a structure it must hold, or its size disagrees with the header."""


class HeaderError(FormatError):
    """A header field is wrong."""


class VersionError(FormatError):
    """A version or required feature this reader does not implement."""


class TrailerError(FormatError):
    """The trailer is damaged or disagrees with the header."""


class ChecksumError(FormatError):
    """A CRC-32C does not match."""


class LimitError(FormatError):
    """A count or size over a normative limit."""


class IndexCorruptError(FormatError):
    """The index region is inconsistent."""


class EntryError(FormatError):
    """An index entry is inconsistent with the registries or the slab."""


class TensorNameError(FormatError):
    """A tensor name is empty, not UTF-8 or duplicated."""


class PaddingError(FormatError):
    """A padding byte is not zero."""


class MetadataError(FormatError):
    """The metadata is not a valid JSON object."""


class UnsupportedError(FormatError):
    """A valid optional feature this reader does not implement (8-bit Marlin) [LAY-9].

    The reference implementation implements everything; other readers may raise it.
    """


class LegacyError(FormatError):
    """An AWQ v1 or compressed-tensors checkpoint that cannot be read or converted exactly,
    or a checkpoint's ``config.json`` given in place of the checkpoint (its folder)."""


class SetError(FormatError):
    """A file set whose manifest, members or ranks break the rules of SET-1 to SET-8; an
    error inside one member is that member's own ``FormatError``, naming its file."""


class SplitError(FormatError):
    """Tensor parallelism: a model the rank-set writer cannot cut (SET-11, SET-12), or a rank
    set read without the rank its answer depends on, or whose members' metadata differ
    (SET-13, SET-14)."""


class RefusedError(FormatError, RuntimeError):
    """A call refused for what the caller did, not for a file's bytes: a closed
    ``safe_open`` used, or tensors that share memory or hold no data handed to
    ``reference.torch.save_file``.  A :class:`FormatError`, as code written for safetensors'
    one error class catches it here, and a ``RuntimeError``, which is what safetensors
    raises for shared and ``meta`` tensors.  Its codes belong to the API that raises it
    (``SAFE_OPEN_CLOSED``, ``TORCH_SHARED_MEMORY``...), not to :data:`spec.registry.ERROR_CODES`,
    which lists what a file can get wrong."""


class TensorNotFoundError(KeyError):
    """No tensor of that name in the file (not a format error)."""


_CLASSES: dict[str, type[FormatError]] = {
    cls.__name__: cls
    for cls in (
        TruncatedError,
        HeaderError,
        VersionError,
        TrailerError,
        ChecksumError,
        LimitError,
        IndexCorruptError,
        EntryError,
        TensorNameError,
        PaddingError,
        MetadataError,
        LegacyError,
        UnsupportedError,
        SetError,
        SplitError,
    )
}


def error(code: str, message: str, **kw: Any) -> FormatError:
    """Build the registered error class for ``code`` (raise the result)."""
    cls = _CLASSES[ERROR_BY_CODE[code].error_class]
    return cls(code, message, **kw)


def field_error(code: str, message: str, offset: int, expected: Any, found: Any) -> FormatError:
    """A field that is not what the spec allows: ``error`` with its usual arguments in order."""
    return error(code, message, offset=offset, expected=expected, found=found)


def over_limit(code: str, message: str, offset: int, limit: int, found: int) -> FormatError:
    """A count or size over a normative limit [LIM-*]."""
    return error(code, message, offset=offset, expected=f"<= {limit}", found=found)


def checksum_mismatch(
    code: str, message: str, offset: int, computed: int, stored: int
) -> FormatError:
    """A stored CRC-32C that is not the one computed: ``expected`` is the computed value."""
    return error(code, message, offset=offset, expected=f"{computed:08x}", found=f"{stored:08x}")
