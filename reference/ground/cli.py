"""What the commands share: their exit statuses, and a parser whose usage errors, with
``--json``, are one JSON document on stdout like every other outcome (exit status 2, as
argparse's)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

#: The commands' exit statuses: done, refused (the input fails a check; nothing written),
#: usage error, I/O error, interrupted by SIGINT (SIGTERM 143, SIGHUP 129:
#: :func:`reference.write.publish.exit_status`).
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def emit_json(document: dict[str, Any]) -> None:
    """One JSON document on stdout: a command's whole outcome with ``--json``."""
    print(json.dumps(document, indent=2))


class JsonUsageParser(argparse.ArgumentParser):
    """argparse, except that when ``json_errors`` is set (the command was given ``--json``) a
    usage error is ``{"status": "error", "exit_status": 2, "error": {"message": ...}}`` on
    stdout instead of the usage text on stderr."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            emit_json({"status": "error", "exit_status": EXIT_USAGE,
                       "error": {"message": message}})  # fmt: skip
            sys.exit(EXIT_USAGE)
        super().error(message)


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "JsonUsageParser",
    "emit_json",
]
