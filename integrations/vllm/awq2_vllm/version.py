"""Which vLLM releases the plugin serves.

Every vLLM name the plugin uses was read in vLLM 0.33.0's installed code (file:line in the
other modules' docstrings); those names move between minor releases (0.33 has no
``marlin_make_workspace``, no ``g_idx`` argument to ``apply_gptq_marlin_linear``, and AWQ goes
through ``AutoAWQConfig``, not ``AWQMarlinConfig``), so any release other than 0.33.x is
refused at registration, with its version named, rather than failing later inside a layer.
"""

from __future__ import annotations

from awq2_vllm.errors import PluginError

SUPPORTED = (0, 33)


def check_vllm_version(version: str) -> None:
    """Raise ``VLLM_VERSION`` unless ``version`` is a 0.33.x release."""
    parts = version.split("+")[0].split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        major_minor = (-1, -1)
    if major_minor != SUPPORTED:
        raise PluginError(
            "VLLM_VERSION",
            "vllm",
            f"vLLM {SUPPORTED[0]}.{SUPPORTED[1]}.x (the release the plugin was checked against)",
            version,
        )
