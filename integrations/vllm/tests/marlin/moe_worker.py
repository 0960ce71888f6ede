"""One tensor-parallel rank of whole tiny MoE models, each built twice through vLLM:
``python moe_worker.py RANK WORLD PORT JOBS OUT``, JOBS a JSON list of
``{"label", "original", "served", "method", "perturb"}``.

Stock: ``EngineArgs(model=original)``, vLLM's default loader and the checkpoint's own
quantisation: an llm-compressor checkpoint (vLLM's compressed-tensors path, experts by
``CompressedTensorsWNA16MoEMethod``) or an AutoAWQ GEMM one (``AutoAWQConfig``, experts by
``AutoAWQMoEMethod``, ``quantization/auto_awq.py:360``, dense layers by
``AutoAWQMarlinLinearMethod``, line 307); plugin: ``EngineArgs(model=served,
quantization="awq_v2", load_format="awq_v2")``, whose experts must be built by the plugin's
``method`` (``AWQv2MoEMethod`` for symmetric experts, ``AWQv2AsymmetricMoEMethod``, a
subclass of ``AutoAWQMoEMethod``, for experts with zero points).  Each is built as
``whole_model_worker.py`` builds one (``create_engine_config``, then the registered loader's
``load_model``), at this rank of ``WORLD`` (vLLM's groups on gloo), and every parameter and
buffer of the two models is compared bit for bit; for each ``RoutedExperts`` module also the
tensors its kernel is handed (``method.moe_quant_config``, the ``w13_weight`` / ``w2_weight``
aliases).  Rows (label, TP,
rank, module, parameter, equal, first difference, kind, stock shape) go to OUT as JSON.
``perturb`` (a parameter name, or null): after the rows above, one is added to one word of that
parameter of the plugin's ``model.layers.0`` experts and the same two models are compared
again, the rows labelled ``LABEL perturbed``: the comparison must see it.

vLLM 0.33's CUDA build runs here on its CPU platform, which would give the experts the
``CPU`` WNA16 MoE backend and the dense layers the CPU linear kernel.  :func:`patches` makes
both paths take the Marlin ones, as on a GPU; each patch says why (file:line of the installed
vLLM, ``vllm/`` below):

1. ``fused_moe/oracle/int_wna16.py:126`` ``_get_priority_backends`` returns
   ``[ZEN_CPU, CPU]`` on the CPU platform (line 128): patched to ``[MARLIN]``, the backend a
   CUDA GPU picks for these layers.  The entries ahead of it on CUDA (line 133) do not take
   them: RDNA3 is for gfx1100, FLASHINFER_TRTLLM wants SM100 and group size 32
   (``fused_moe/experts/trtllm_mxint4_moe.py:45, 62``).  One exception: on SM90 (H100/H200)
   with the optional ``humming`` package installed, ``prioritize_humming`` moves HUMMING ahead
   of MARLIN (``quantization/utils/humming/priority.py:12, 44``; ``int_wna16.py:143``); the
   plugin's method then takes HUMMING too, from the same N-first buffers, not tested here.
2. ``fused_moe/experts/marlin_moe.py:592`` ``MarlinExpertsBase._supports_current_device``
   (``is_cuda() and has_device_capability((7, 5))``), checked by ``is_supported_config``
   (``fused_moe/modular_kernel.py:590``) when the oracle picks ``MarlinExperts``: patched to
   true.  The kernel object is built (``make_wna16_moe_kernel``, ``int_wna16.py:415``) but
   never run.
3. ``_custom_ops.py:1167`` ``gptq_marlin_moe_repack`` (``int_wna16.py:670, 677``) loops over
   the experts calling ``torch.ops._C.gptq_marlin_repack``, a CUDA kernel: replaced by the
   same loop over vLLM's CPU reference of that repack, ``awq_reference._cpu_gptq_marlin_repack``
   (``utils/marlin_utils_test.py:53, 72``), expert by expert.  ``ops.gptq_marlin_repack``
   (``_custom_ops.py:1104``, the dense layers' ``MarlinLinearKernel``,
   ``kernels/linear/mixed_precision/marlin.py:101``) is replaced by that reference too.
4. ``quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py:149`` calls
   ``choose_mp_linear_kernel`` (``kernels/linear/__init__.py:887``), which on the CPU platform
   picks ``CPUWNA16LinearKernel`` (``kernels/linear/__init__.py:563``): patched (in that
   module) to return ``MarlinLinearKernel``, the kernel the plugin's dense layers are built
   for (``AWQ2_VLLM_KERNEL=marlin``, ``conftest.py``), so the stock model's attention layers
   are Marlin too and comparable byte for byte.

5. The AutoAWQ experts' Marlin conversion (``int_wna16.py:749``
   ``_process_awq_weights_marlin``) calls ``ops.awq_marlin_moe_repack`` (lines 819, 826;
   ``_custom_ops.py:1188``), a loop over the experts calling ``torch.ops._C.awq_marlin_repack``,
   a CUDA kernel: replaced by the same loop over a CPU reference of that repack,
   :func:`_cpu_awq_marlin_repack`.  What the CUDA op computes is what vLLM's kernel test
   ``test_awq_marlin_repack`` (``tests/kernels/quantization/test_marlin_gemm.py`` in vLLM's
   repository) asserts: for codes ``q [k, n]``, ``awq_marlin_repack(awq_pack(q), k, n, bits)
   == marlin_weights(q, k, n, bits, get_weight_perm(bits))``; and ``test_gptq_marlin_repack``
   (same file, no act order) asserts ``gptq_marlin_repack(gptq_pack(q)) == marlin_weights(q)``
   too.  So the reference unpacks the AWQ words to codes, the inverse of vLLM's ``awq_pack``
   (``quantization/utils/quant_utils.py:909``: the codes of each 8 columns interleaved
   ``[0, 2, 4, 6, 1, 3, 5, 7]``, line 919, then ``pack_cols``, field ``i`` in bits
   ``num_bits * i``, line 843), checks that ``awq_pack`` of those codes gives the words back,
   and hands them, packed along k by vLLM's ``pack_rows`` (line 819, ``gptq_pack``), to the
   GPTQ reference of patch 3 (``marlin_weights``).  Only this path calls the op: the AutoAWQ
   dense layers are converted to GPTQ's order first and repacked by patch 3's op.
6. ``quantization/auto_awq.py:448`` ``AutoAWQMarlinLinearMethod.create_weights`` calls
   ``choose_mp_linear_kernel``, on the CPU platform ``CPUWNA16LinearKernel``: patched (in that
   module) to return ``MarlinLinearKernel``, as patch 4, so the stock AutoAWQ model's dense
   layers are Marlin too.  That method, its AWQ-to-GPTQ conversion (``auto_awq.py:92``,
   line 511) and the kernel's processing are what a CUDA GPU runs for them (line 331, there
   with ``input_dtype = get_marlin_input_dtype(prefix)``, None unless
   ``VLLM_MARLIN_INPUT_DTYPE`` is set); which kernel a GPU picks is the list at
   ``kernels/linear/__init__.py:540``: Marlin on SM80-89, while SM90 tries Machete first
   (``mixed_precision/machete.py:28``, uint4 with zero points, group 128), not the plugin's
   ``AWQ2_VLLM_KERNEL=marlin`` layout, not compared here.

Nothing else is patched: vLLM's weight loaders, TP cuts, padding decisions, scale and zero-point
permutations (``int_wna16.py:577`` ``_process_weights_marlin``, line 749 for AWQ) run as shipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("AWQ2_VLLM_KERNEL", "marlin")
sys.path.insert(0, str(Path(__file__).parent))

import awq_reference
import torch

#: The plugin's dense parameter names for compressed-tensors' (``MarlinLinearKernel`` is built
#: with ``w_q/w_s/w_zp`` names ``weight_packed / weight_scale / weight_zero_point``, and sets
#: ``w_zp`` to the empty tensor when the scheme is symmetric: ``compressed_tensors_wNa16.py:246``,
#: ``kernels/linear/mixed_precision/marlin.py:95, 172``).
DENSE_NAMES = {"weight_packed": "qweight", "weight_scale": "scales", "weight_zero_point": "qzeros",
               "w_zp": "qzeros"}  # fmt: skip
#: Stock-only tensors the kernel never reads: compressed-tensors' dense ``weight_shape``
#: (the checkpoint's [n, k], used by its weight loader only).
STOCK_ONLY = ("weight_shape",)
#: The attention layers' KV-cache scales, 1.0 in both models but of shape ``(1,)`` in the stock
#: one: compressed-tensors gives ``Attention`` its ``CompressedTensorsKVCacheMethod``
#: (``quantization/compressed_tensors/compressed_tensors.py:214``), which makes them
#: ``torch.ones(1)`` (line 1158) and re-registers them as buffers of that shape (line 1256);
#: without a KV-cache method (awq_v2, as AutoAWQ) they stay ``torch.tensor(1.0)``
#: (``layers/attention/attention.py:136``).  The KV cache is not quantised (``kv_cache_scheme``
#: null), so no kernel reads them; they are compared by value and the shape noted.
KV_SCALES = ("_k_scale", "_v_scale", "_q_scale")
#: vLLM 0.34's compressed-tensors KV-cache method also registers these on every Attention, as
#: parameters, for a checkpoint whose KV cache is not quantised too (``kv_cache_scheme`` null);
#: the plugin's model has none.  Each is accepted only as the identity a kernel would ignore:
#: scales 1, zero points 0.
KV_QUANT = {"k_scale": 1.0, "v_scale": 1.0, "q_scale": 1.0, "k_zero_point": 0.0,
            "v_zero_point": 0.0, "q_zero_point": 0.0}  # fmt: skip


def _cpu_gptq_marlin_moe_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
    """``ops.gptq_marlin_moe_repack`` (``_custom_ops.py:1167``) with the CPU reference of the
    per-expert repack in place of ``torch.ops._C.gptq_marlin_repack``."""
    out = [awq_reference._cpu_gptq_marlin_repack(b_q_weight[e], size_k, size_n, num_bits,
                                                 is_a_8bit)
           for e in range(b_q_weight.shape[0])]  # fmt: skip
    return torch.stack(out)


#: ``awq_pack``'s interleave of the codes of each 32 // bits columns
#: (``quant_utils.py:919, 921``), and its inverse: field ``i`` of a word holds column
#: ``AWQ_ORDER[bits][i]`` of its block.
AWQ_ORDER = {4: [0, 2, 4, 6, 1, 3, 5, 7], 8: [0, 2, 1, 3]}


def _cpu_awq_marlin_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
    """``torch.ops._C.awq_marlin_repack`` on the CPU (patch 5 of the module docstring): AWQ's
    ``[k, n // pf]`` words to codes ``[k, n]``, checked against vLLM's ``awq_pack``, then
    packed along k (``pack_rows``) and repacked by the GPTQ reference."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import awq_pack, pack_rows

    pf = 32 // num_bits
    assert b_q_weight.shape == (size_k, size_n // pf), (b_q_weight.shape, size_k, size_n)
    shifts = torch.arange(0, 32, num_bits, dtype=torch.int32)
    fields = (b_q_weight.unsqueeze(-1) >> shifts) & ((1 << num_bits) - 1)  # [k, n // pf, pf]
    inverse = torch.argsort(torch.tensor(AWQ_ORDER[num_bits]))
    q = fields[:, :, inverse].reshape(size_k, size_n)
    assert torch.equal(awq_pack(q, num_bits, size_k, size_n), b_q_weight)
    gptq = pack_rows(q, num_bits, size_k, size_n)
    return awq_reference._cpu_gptq_marlin_repack(gptq, size_k, size_n, num_bits, is_a_8bit)


def _cpu_awq_marlin_moe_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
    """``ops.awq_marlin_moe_repack`` (``_custom_ops.py:1188``) with
    :func:`_cpu_awq_marlin_repack` in place of ``torch.ops._C.awq_marlin_repack``."""
    out = [_cpu_awq_marlin_repack(b_q_weight[e], size_k, size_n, num_bits, is_a_8bit)
           for e in range(b_q_weight.shape[0])]  # fmt: skip
    return torch.stack(out)


def patches() -> None:
    """The six patches of the module docstring."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.kernels.linear.mixed_precision.marlin import MarlinLinearKernel
    from vllm.model_executor.layers.fused_moe.experts import marlin_moe
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16
    from vllm.model_executor.layers.quantization import auto_awq
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        compressed_tensors_wNa16 as ct_dense,
    )

    int_wna16._get_priority_backends = lambda: [int_wna16.WNA16MoEBackend.MARLIN]
    marlin_moe.MarlinExpertsBase._supports_current_device = staticmethod(lambda: True)
    ops.gptq_marlin_moe_repack = _cpu_gptq_marlin_moe_repack
    ops.gptq_marlin_repack = awq_reference._cpu_gptq_marlin_repack
    ct_dense.choose_mp_linear_kernel = lambda config, compute_capability=None: MarlinLinearKernel
    ops.awq_marlin_moe_repack = _cpu_awq_marlin_moe_repack
    auto_awq.choose_mp_linear_kernel = lambda config, compute_capability=None: MarlinLinearKernel


def build(folder: Path, world: int, **kw):
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model_loader

    args = EngineArgs(model=str(folder), dtype="float16", enforce_eager=True, max_model_len=256,
                      tensor_parallel_size=world, **kw)  # fmt: skip
    cfg = args.create_engine_config()
    with set_current_vllm_config(cfg):
        model = get_model_loader(cfg.load_config).load_model(cfg, cfg.model_config)
    return cfg, model


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    if t.element_size() == 2:
        return t.view(torch.int16)
    if t.element_size() == 4:
        return t.view(torch.int32)
    return t.view(torch.int64) if t.element_size() == 8 else t.view(torch.uint8)


def compare(got, ref) -> tuple[bool, str]:
    """(equal bit for bit, where the first difference is)."""
    if not isinstance(got, torch.Tensor) or not isinstance(ref, torch.Tensor):
        return (got is None and ref is None), f"{type(got).__name__} vs {type(ref).__name__}"
    if got.shape != ref.shape or got.dtype != ref.dtype:
        shapes = f"{tuple(got.shape)} {got.dtype} != {tuple(ref.shape)} {ref.dtype}"
        return False, f"shape/dtype {shapes}"
    a, b = _bits(got), _bits(ref)
    diff = (a != b).nonzero()
    if len(diff) == 0:
        return True, ""
    at = tuple(diff[0].tolist())
    return False, f"{len(diff)} differ, first at {at}: {int(a[at]):#x} != {int(b[at]):#x}"


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's own parameters and buffers, and the tensors set as plain attributes (e.g.
    ``w13_weight``, the alias the kernel is called with)."""
    out = dict(module.named_parameters(recurse=False, remove_duplicate=False))
    out.update(module.named_buffers(recurse=False))
    for name, value in vars(module).items():
        if isinstance(value, torch.Tensor) and not name.startswith("_") and name not in out:
            out[name] = value
    return out


def _quant_config_tensors(method) -> dict[str, object]:
    """Every field of the experts' ``moe_quant_config`` (``FusedMoEQuantConfig``: four
    ``FusedMoEQuantDesc``), the tensors and the settings, as the kernel reads them."""
    out: dict[str, object] = {}
    qc = getattr(method, "moe_quant_config", None)
    if qc is None:
        return out
    for f in dataclasses.fields(qc):
        value = getattr(qc, f.name)
        if dataclasses.is_dataclass(value):
            for g in dataclasses.fields(value):
                out[f"moe_quant_config.{f.name}.{g.name}"] = getattr(value, g.name)
        else:
            out[f"moe_quant_config.{f.name}"] = value
    return out


def _backend(method) -> str:
    """The WNA16 MoE backend the oracle chose (``wna16_backend`` on compressed-tensors'
    method, ``wna16_moe_backend`` on AutoAWQ's, ``auto_awq.py:538``)."""
    backend = getattr(method, "wna16_backend", None) or method.wna16_moe_backend
    return backend.value


def rows_for(stock, plugin, method: str) -> list[list]:
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    rows = []
    theirs = dict(plugin.named_modules())
    for name, ref_mod in stock.named_modules():
        got_mod = theirs.get(name)
        ref_t, got_t = _tensors(ref_mod), (_tensors(got_mod) if got_mod is not None else {})
        experts = isinstance(ref_mod, RoutedExperts)
        kind = "experts" if experts else "dense"
        if experts:
            ref_t.update(_quant_config_tensors(ref_mod.quant_method))
            got_t.update(_quant_config_tensors(got_mod.quant_method))
            ref_m, got_m = ref_mod.quant_method, got_mod.quant_method
            rows.append([name, "(method)", type(got_m).__name__ == method
                         and _backend(ref_m) == _backend(got_m) == "MARLIN",
                         f"{type(ref_m).__name__} {_backend(ref_m)} / "
                         f"{type(got_m).__name__} {_backend(got_m)}", kind, None])  # fmt: skip
        seen = set()
        for pname, ref in ref_t.items():
            if not experts and pname in STOCK_ONLY:
                continue
            gname = pname if experts else DENSE_NAMES.get(pname, pname)
            seen.add(gname)
            if gname not in got_t:
                if pname in KV_QUANT and isinstance(ref, torch.Tensor):
                    identity = bool(torch.all(ref.float() == KV_QUANT[pname]))
                    rows.append([name, pname, identity, f"stock only, the unquantised KV "
                                 f"cache's identity {KV_QUANT[pname]}: {identity}", "kv-scale",
                                 None])  # fmt: skip
                    continue
                rows.append([name, pname, False, "missing in the plugin's model", kind, None])
                continue
            got = got_t[gname]
            if pname in KV_SCALES and got.numel() == ref.numel() == 1:
                equal, _ = compare(got.reshape(()), ref.reshape(()))
                note = f"value {got.item()} == {ref.item()}; shape {tuple(got.shape)} != "
                rows.append([name, pname, equal, f"{note}{tuple(ref.shape)}", "kv-scale", None])
                continue
            if isinstance(ref, torch.Tensor) or isinstance(got, torch.Tensor) or ref is None:
                equal, where = compare(got, ref)
            else:
                equal, where = repr(got) == repr(ref), f"{got!r} != {ref!r}"
            shape = list(ref.shape) if isinstance(ref, torch.Tensor) else None
            rows.append([name, pname if pname == gname else f"{pname}/{gname}", equal,
                         "" if equal else where, kind, shape])  # fmt: skip
        for gname in got_t:
            if gname not in seen:
                rows.append([name, gname, False, "only in the plugin's model", kind, None])
    return rows


def main() -> None:
    import vllm.plugins
    from vllm.config import VllmConfig, set_current_vllm_config

    rank, world, port = (int(a) for a in sys.argv[1:4])
    jobs, out = json.loads(Path(sys.argv[4]).read_text()), Path(sys.argv[5])
    vllm.plugins.load_general_plugins()
    patches()
    with set_current_vllm_config(VllmConfig()):
        awq_reference.init_distributed(rank, world, port)
    rows = []
    for job in jobs:
        _, stock = build(Path(job["original"]), world)
        _, plugin = build(Path(job["served"]), world, quantization="awq_v2",
                          load_format="awq_v2")  # fmt: skip
        rows += [[job["label"], world, rank, *row]
                 for row in rows_for(stock, plugin, job["method"])]  # fmt: skip
        if job.get("perturb"):
            experts = dict(plugin.named_modules())[_first_experts(plugin)]
            getattr(experts, job["perturb"]).data.view(-1)[5] += 1
            rows += [[f"{job['label']} perturbed", world, rank, *row]
                     for row in rows_for(stock, plugin, job["method"])]  # fmt: skip
        del stock, plugin
    out.write_text(json.dumps(rows))


def _first_experts(model) -> str:
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    return next(n for n, m in model.named_modules() if isinstance(m, RoutedExperts))


if __name__ == "__main__":
    main()
