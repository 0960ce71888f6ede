"""Which vLLM releases the plugin serves (``awq2_vllm.version``); what happens beside the
others is tested with a real older vLLM in ``cpu/test_host.py``."""

from __future__ import annotations

import pytest
from awq2_vllm.errors import PluginError
from awq2_vllm.version import check_vllm_version, release


@pytest.mark.parametrize("version", ["0.31.0", "0.35.0", "1.0.0", "dev", "0.3"])
def test_other_vllm_versions_are_refused_by_name(version):
    with pytest.raises(PluginError) as caught:
        check_vllm_version(version)
    assert caught.value.code == "VLLM_VERSION" and version in str(caught.value)
    assert "0.32.x or 0.33.x or 0.34.x" in str(caught.value)


@pytest.mark.parametrize(
    "version", ["0.32.0", "0.32.1+cpu", "0.33.0", "0.33.2", "0.33.0+cu130", "0.34.0"]
)
def test_the_cpu_and_cuda_releases_are_served(version):
    check_vllm_version(version)
    assert release(version) in ((0, 32), (0, 33), (0, 34))
