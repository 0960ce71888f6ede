"""MoE experts on vLLM 0.33's Marlin path: the whole tiny Qwen3-MoE and Mixtral models, loaded
by the plugin from the converted file (``--quantization awq_v2 --load-format awq_v2``), hold bit
for bit what vLLM's own path holds for the original checkpoint with the Marlin MoE backend:

* ``ct``: the symmetric llm-compressor checkpoint (``tests/fixtures/breadth``), vLLM's
  compressed-tensors path (``CompressedTensorsWNA16MoEMethod``,
  ``fused_moe/oracle/int_wna16.py:577`` ``_process_weights_marlin``), the plugin's
  ``AWQv2MoEMethod``;
* ``awq``: an AutoAWQ GEMM checkpoint of the same architecture with zero points
  (``checkpoints.awq_moe``), vLLM's ``AutoAWQConfig`` (``AutoAWQMoEMethod``, ``int_wna16.py:749``
  ``_process_awq_weights_marlin``; dense layers ``AutoAWQMarlinLinearMethod`` on
  ``MarlinLinearKernel``), the plugin's ``AWQv2AsymmetricMoEMethod``;

every parameter and buffer of every ``RoutedExperts`` module, the tensors and settings of its
``moe_quant_config``, and every other parameter of the model, at TP 1 and at TP 2 (two
processes on gloo) from the single file and from a ``convert --tp 2`` rank set.  vLLM's CUDA
build runs on its CPU platform; what is patched for that, and why, is in ``moe_worker.py``.
A perturbed word of one expert buffer (the packed weights for ``ct``, the zero points for
``awq``) fails the comparison, of the same two models that compared equal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import awq_reference
import pytest

HERE = Path(__file__).parent
FIXTURES = HERE.parents[3] / "tests" / "fixtures" / "breadth"
MODELS = ("qwen3_moe", "mixtral")
LAYERS = 2  # each fixture: two decoder layers, one RoutedExperts module each
SOURCES = ("ct", "awq")
#: Per source: the plugin's experts method, its expert tensors, its w13 weight, the dense
#: layers' weight and scale rows (stock name/plugin name, as ``moe_worker.rows_for`` names
#: them), and the expert tensor the negative check perturbs with what else must then differ.
KIND = {
    "ct": {"method": "AWQv2MoEMethod", "w13": "w13_weight_packed",
           "experts": {"w13_weight_packed", "w2_weight_packed", "w13_weight_scale",
                       "w2_weight_scale", "w13_weight_shape", "w2_weight_shape", "w13_weight",
                       "w2_weight"},
           "dense": {"weight_packed/qweight", "weight_scale/scales"},
           "perturb": "w13_weight_packed", "differs": {"w13_weight_packed", "w13_weight"}},
    "awq": {"method": "AWQv2AsymmetricMoEMethod", "w13": "w13_qweight",
            "experts": {"w13_qweight", "w2_qweight", "w13_scales", "w2_scales", "w13_qzeros",
                        "w2_qzeros", "w13_weight", "w2_weight"},
            "dense": {"qweight", "scales", "qzeros"},
            # the zero points are the kernel's too: moe_quant_config's w1 zp is the same tensor
            # (auto_awq.py:726-733)
            "perturb": "w13_qzeros", "differs": {"w13_qzeros", "moe_quant_config._w1.zp"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[tuple[str, str], dict[str, Path]]:
    """Per (fixture, source): the original checkpoint, its converted file and its ``--tp 2``
    rank set (the eight conversions run side by side)."""
    from checkpoints import awq_moe

    root = tmp_path_factory.mktemp("moe")
    out, procs = {}, []
    for name in MODELS:
        for source in SOURCES:
            src = root / source / "src" / name
            if source == "awq":
                awq_moe(FIXTURES / name, src)
            else:
                src.mkdir(parents=True)
                for f in ("config.json", "generation_config.json", "model.safetensors"):
                    shutil.copy(FIXTURES / name / f, src / f)
            out[name, source] = {"original": src, "file": root / source / "file" / name,
                                 "set": root / source / "set" / name}  # fmt: skip
            for kind, extra in (("file", []), ("set", ["--tp", "2"])):
                out[name, source][kind].parent.mkdir(exist_ok=True)
                procs.append(subprocess.Popen([sys.executable, "-m", "reference.convert",
                                               str(src), f"{out[name, source][kind]}/", *extra,
                                               "--quiet"]))  # fmt: skip
    assert all(p.wait(timeout=600) == 0 for p in procs)
    return out


def _run(world: int, jobs: list[dict], tmp: Path) -> list[list]:
    spec = tmp / f"jobs{world}.json"
    spec.write_text(json.dumps(jobs))
    port = awq_reference.ports() + 50 + world
    procs, outs = [], []
    for rank in range(world):
        outs.append(tmp / f"moe{world}-{rank}.json")
        cmd = [sys.executable, str(HERE / "moe_worker.py"), str(rank), str(world), str(port),
               str(spec), str(outs[-1])]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env={**os.environ, "AWQ2_VLLM_KERNEL": "marlin"}))
    for p in procs:
        assert p.wait(timeout=600) == 0
    return [row for out in outs for row in json.loads(out.read_text())]


def _job(folders, name: str, source: str, kind: str, perturb: bool = False) -> dict:
    f = folders[name, source]
    return {"label": f"{name} {source} {kind}", "original": str(f["original"]),
            "served": str(f[kind]), "method": KIND[source]["method"],
            "perturb": KIND[source]["perturb"] if perturb else None}  # fmt: skip


@pytest.fixture(scope="module")
def tp1_rows(folders, tmp_path_factory):
    """Both sources of both fixtures from the file, in one process; the first fixture's two
    are compared again after the perturbation."""
    jobs = [_job(folders, n, s, "file", perturb=n == MODELS[0]) for s in SOURCES for n in MODELS]
    return _run(1, jobs, tmp_path_factory.mktemp("tp1"))


def _table(rows: list[list]) -> str:
    """Every row of the expert modules (the ``moe_quant_config`` fields folded into one), and
    per model and rank one line for the dense parameters, one for the KV-cache scales; every
    unequal row in full."""
    lines = [f"{'model':<30}TP rank {'module':<50} {'parameter':<24} {'shape':<14} equal  "
             "first difference"]  # fmt: skip

    def line(r, name=None, equal=None, where=None):
        shape = "x".join(map(str, r[8])) if r[8] else ""
        lines.append(
            f"{r[0]:<30}{r[1]:<3}{r[2]:<5}{r[3]:<50} {name or r[4]:<24} {shape:<14} "
            f"{r[5] if equal is None else equal!s:<6} {r[6] if where is None else where}"
        )

    groups: dict[tuple, list[list]] = {}
    for r in rows:
        groups.setdefault((r[0], r[1], r[2], r[7] if r[7] != "experts" else r[3]), []).append(r)
    for (_, _, _, what), group in groups.items():
        first = group[0]
        if what in ("dense", "kv-scale"):
            bad = [r for r in group if not r[5]]
            line([*first[:3], f"({len(group)} {what} tensors)", "", all(r[5] for r in group),
                  group[0][6] if what == "kv-scale" else "", what, None], name="all")  # fmt: skip
            for r in bad:
                line(r)
            continue
        config = [r for r in group if r[4].startswith("moe_quant_config.")]
        for r in group:
            if r not in config:
                line(r)
        bad = [r for r in config if not r[5]]
        if config:
            line(
                first,
                name=f"moe_quant_config ({len(config)})",
                equal=not bad,
                where="; ".join(f"{r[4]}: {r[6]}" for r in bad),
            )
    return "\n".join(lines)


def _check(rows: list[list], labels: list[str], world: int) -> None:
    for label in labels:
        kind = KIND[label.split()[1]]
        for rank in range(world):
            mine = [r for r in rows if r[0] == label and r[2] == rank]
            experts = {r[3] for r in mine if r[7] == "experts"}
            assert len(experts) == LAYERS, (label, rank, experts)
            for module in experts:
                names = {r[4] for r in mine if r[3] == module}
                w13 = next(r[8] for r in mine if r[3] == module and r[4] == kind["w13"])
                # Marlin's [E, hidden / 16, 2 I_rank * 2]: this rank's cut of I = 256
                assert w13 == [4, 256 // 16, 2 * (256 // world) * 2], (module, w13)
                assert names >= kind["experts"] | {"(method)"}, (module, names)
                assert sum(n.startswith("moe_quant_config.") for n in names) >= 20
            dense = {r[4] for r in mine if r[7] == "dense"}
            assert dense >= kind["dense"], (label, rank)
            assert {r[3] for r in mine} >= {"model.embed_tokens", "lm_head"}
            kv = {f"{p}{q}_{r}" for p in ("", "_") for q in "kvq" for r in ("scale",)} | {
                f"{q}_zero_point" for q in "kvq"
            }  # moe_worker.KV_SCALES and KV_QUANT
            assert {r[4] for r in mine if r[7] == "kv-scale"} <= kv
    assert all(r[5] for r in rows), _table([r for r in rows if not r[5]])


def test_tp1_every_expert_and_dense_parameter_equals_vllms_marlin_moe_path(tp1_rows):
    rows = [r for r in tp1_rows if not r[0].endswith("perturbed")]
    print(f"\nMoE equivalence table, TP 1 (vLLM {_vllm_version()}):\n" + _table(rows))
    _check(rows, [f"{n} {s} file" for s in SOURCES for n in MODELS], 1)


def test_tp2_from_the_file_and_from_a_rank_set(folders, tmp_path):
    jobs = [_job(folders, n, s, kind) for s in SOURCES for n in MODELS for kind in ("file", "set")]
    rows = _run(2, jobs, tmp_path)
    print("\nMoE equivalence table, TP 2:\n" + _table(rows))
    _check(rows, [j["label"] for j in jobs], 2)


@pytest.mark.parametrize("source", SOURCES)
def test_a_perturbed_expert_word_fails_the_comparison(tp1_rows, source):
    """The same two models, equal in ``test_tp1_...``, compared again after one word of the
    plugin's layer-0 experts changed: exactly that tensor (and what aliases it) differs."""
    label = f"{MODELS[0]} {source} file perturbed"
    rows = [r for r in tp1_rows if r[0] == label]
    assert rows and all(r[5] for r in tp1_rows if r[0] == label.removesuffix(" perturbed"))
    bad = [r for r in rows if not r[5]]
    print(f"\nwith one word of layer 0's {KIND[source]['perturb']} changed after loading:\n"
          + _table(bad))  # fmt: skip
    assert {(r[3].split(".")[2], r[4]) for r in bad} == {("0", n) for n in
                                                         KIND[source]["differs"]}  # fmt: skip
    assert all(r[6].startswith("1 differ") for r in bad)


def _vllm_version() -> str:
    import vllm

    return vllm.__version__
