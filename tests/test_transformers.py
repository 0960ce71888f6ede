"""transformers reads what ``reference.torch.save_file`` writes (issue 39).

``transformers.modeling_utils.load_state_dict`` opens a ``.safetensors`` path with the
``safe_open`` that module imported from safetensors, and asks it ``keys()``, ``get_tensor``
(``get_slice``, ``get_dtype`` and ``get_shape`` for ``map_location="meta"``).  Here that name is
replaced by ``reference.safe_open`` (``monkeypatch``), so that transformers' own function runs
over an AWQ-v2 file, through this project's reader; what it returns is compared with
``reference.torch.load_file`` of the same file and loaded, strictly, into a tiny Llama built
from a config (nothing downloaded).

transformers 4.x's ``load_state_dict`` also checked the file's metadata first: ``metadata is
not None and metadata.get("format") not in ["pt", "tf", "flax", "mlx"]`` raised ``OSError``
(``modeling_utils.py``, 4.x); transformers 5 (5.17 in CI's environment, 5.19 checked too) no
longer does.  :func:`test_transformers_4_metadata_check` runs that expression over
``safe_open(...).metadata()``: it passes because a file saved without metadata reports
``None``, as safetensors does, and ``{"format": "pt"}`` when saved so.

Needs torch and transformers (CI's torch environment, ``.ci/run``); skipped without them, a
failure when ``AWQ2_REQUIRE_TORCH=1``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import torch
    import transformers
    import transformers.modeling_utils
except ImportError:
    if os.environ.get("AWQ2_REQUIRE_TORCH") == "1":
        pytest.fail("AWQ2_REQUIRE_TORCH=1 and torch or transformers does not import", pytrace=False)
    pytest.skip("torch and transformers are not installed", allow_module_level=True)

import reference
import reference.torch as rt

#: The formats transformers 4.x's load_state_dict accepted in a file's metadata.
FORMATS_4X = ["pt", "tf", "flax", "mlx"]


def _tiny_llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_transformers_load_state_dict_reads_through_reference_safe_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _tiny_llama()
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    path = tmp_path / "model.safetensors"  # load_state_dict dispatches on the suffix
    rt.save_file(state, path)  # no metadata
    monkeypatch.setattr(transformers.modeling_utils, "safe_open", reference.safe_open)
    loaded = transformers.modeling_utils.load_state_dict(path)
    ours = rt.load_file(path)
    assert list(loaded) == sorted(state) and set(ours) == set(state)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor) and torch.equal(ours[name], tensor), name
    other = _tiny_llama()
    torch.nn.init.zeros_(other.lm_head.weight)
    other.load_state_dict(loaded, strict=True)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(other(ids).logits, model(ids).logits)
    meta = transformers.modeling_utils.load_state_dict(path, map_location="meta")
    for name, tensor in state.items():
        assert meta[name].device.type == "meta", name
        assert (meta[name].shape, meta[name].dtype) == (tensor.shape, tensor.dtype), name


def test_transformers_4_metadata_check(tmp_path: Path) -> None:
    tensors = {"w": torch.ones(2, 3)}
    for metadata, expected in ((None, None), ({"format": "pt"}, {"format": "pt"})):
        rt.save_file(tensors, tmp_path / "m.awq2", metadata)
        with reference.safe_open(tmp_path / "m.awq2", "pt") as f:
            found = f.metadata()
        assert found == expected
        refused = found is not None and found.get("format") not in FORMATS_4X
        assert not refused, found
