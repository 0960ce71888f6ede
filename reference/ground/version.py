"""This package's version, one source: ``pyproject.toml``'s, as the installed distribution
records it (``0+unknown`` in a source tree that was never installed)."""

from __future__ import annotations

from importlib import metadata

try:
    VERSION = metadata.version("awq-v2")
except metadata.PackageNotFoundError:
    VERSION = "0+unknown"
