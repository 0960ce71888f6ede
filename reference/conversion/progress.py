"""The progress a conversion shows on a terminal's stderr, and the check a writer runs on
each file it finishes [WR-2]."""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reference.format.reader import Reader


def verify_file(path: Path, progress: Callable[[int], object] | None = None) -> None:
    """Full validation and every payload checksum of a written file [WR-2]; ``progress`` is
    told the bytes verified as they are."""
    with Reader(path, validate=True) as reader:
        reader.verify(progress)


class Bars:
    """The progress a terminal shows on stderr: payload bytes converted, with the rate, then
    payload bytes verified (every member of a set, as each is checked before publication).
    Disabled, every method does nothing but the verification itself."""

    def __init__(self, enabled: bool, total: int, *, verify_total: int | None) -> None:
        self._enabled, self._verify_total = enabled, verify_total
        self._lock = threading.Lock()  # a set's members may be verified on several threads
        self._converting: Any = None
        self._verifying: Any = None
        if enabled:
            self._converting = self._bar("converting", total)

    @staticmethod
    def _bar(desc: str, total: int | None) -> Any:
        from tqdm import tqdm

        width = shutil.get_terminal_size((100, 24)).columns or 100  # 0 on a sizeless pty
        return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                    ncols=width, leave=True)  # fmt: skip

    def converted(self, nbytes: int) -> None:
        if self._converting is not None:
            self._converting.update(nbytes)

    def converting_done(self) -> None:
        if self._converting is not None:
            self._converting.close()
            self._converting = None

    def verify_file(self, path: Path) -> None:
        """The writer's check [WR-2]: full validation and every checksum, shown as it goes."""
        if not self._enabled:
            verify_file(path)
            return
        with self._lock:
            self.converting_done()
            if self._verifying is None:
                self._verifying = self._bar("verifying", self._verify_total)
        verify_file(path, self._verified)

    def _verified(self, nbytes: int) -> None:
        with self._lock:
            self._verifying.update(nbytes)

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.converting_done()
        if self._verifying is not None:
            self._verifying.close()
            self._verifying = None
