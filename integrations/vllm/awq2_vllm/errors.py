"""The plugin's one error: a stable code, what it is about (a layer, a tensor, vllm), what
was expected and what was found."""

from __future__ import annotations

from typing import Any


class PluginError(ValueError):
    """Something the awq_v2 plugin does not serve.  ``code`` is stable; ``where`` names the
    layer (vLLM's module name, or the file's tensor prefix) or ``"vllm"``."""

    def __init__(self, code: str, where: str, expected: Any, found: Any) -> None:
        self.code, self.where, self.expected, self.found = code, where, expected, found
        super().__init__(f"[{code}] {where}: expected {expected}, found {found}")
