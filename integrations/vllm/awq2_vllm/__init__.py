"""awq2_vllm: a vLLM 0.33 plugin that serves AWQ-v2 files without repacking.

``register`` is the ``vllm.general_plugins`` entry point (``pyproject.toml``).  vLLM 0.33's
``vllm/plugins/__init__.py:77`` (``load_general_plugins``) calls every function of that group
once per process, guarded by a module flag (line 83); a second call in the same process
returns early, and ``register`` itself is idempotent, so calling it again is harmless too.

It registers two names:

* the quantisation method ``awq_v2`` (:class:`awq2_vllm.config.AWQv2Config`), through
  ``register_quantization_config`` (``vllm/model_executor/layers/quantization/__init__.py:61``,
  which appends the name to ``QUANTIZATION_METHODS`` and to the platform's
  ``supported_quantization``);
* the load format ``awq_v2`` (:class:`awq2_vllm.loader.AWQv2ModelLoader`), through
  ``register_model_loader`` (``vllm/model_executor/model_loader/__init__.py:69``).
"""

from __future__ import annotations

import logging

_registered = False


def register() -> None:
    """Register ``awq_v2`` as a quantisation method and a load format (idempotent).

    It never raises.  vLLM calls its plugins without a guard (``load_general_plugins``), in
    every process, for every model: an exception here would end stock runs too.  Whatever
    fails (an unserved release, a vLLM whose internals moved, a broken install) is logged in
    one warning line and nothing is registered; only a run that asks for ``awq_v2`` then
    fails, with vLLM's own "unknown quantization method"."""
    global _registered
    if _registered:
        return
    _registered = True
    log = logging.getLogger(__name__)
    try:
        import vllm

        version = str(getattr(vllm, "__version__", "unknown"))
    except Exception as e:  # never break the host
        log.warning("awq2_vllm: vLLM could not be imported (%s: %s): awq_v2 is not registered",
                    type(e).__name__, e)  # fmt: skip
        return
    try:
        _register(version)
    except Exception as e:  # never break the host
        log.warning("awq2_vllm: awq_v2 could not be registered beside vLLM %s (%s: %s); stock "
                    "models are unaffected", version, type(e).__name__, e)  # fmt: skip


def _register(version: str) -> None:
    from awq2_vllm.version import expected, served

    if not served(version):
        # Never break the host: stock models keep working; only awq_v2 is unavailable.
        logging.getLogger(__name__).warning(
            "awq2_vllm: vLLM %s is not a release this plugin serves (%s): awq_v2 is not registered",
            version,
            expected(),
        )
        return
    # Everything that can fail is imported before anything is registered: a failure leaves
    # vLLM as it was.
    from vllm.model_executor.layers.quantization import register_quantization_config
    from vllm.model_executor.model_loader import register_model_loader

    from awq2_vllm.config import AWQv2Config
    from awq2_vllm.loader import AWQv2ModelLoader

    register_quantization_config("awq_v2")(AWQv2Config)
    register_model_loader("awq_v2")(AWQv2ModelLoader)


__all__ = ["register"]
