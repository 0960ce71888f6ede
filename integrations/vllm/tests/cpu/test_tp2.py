"""Tensor parallelism on vLLM's CPU build: two CPU workers (``VLLM_CPU_OMP_THREADS_BIND=0|1``,
one core each).  A rank set written by ``convert --tp 2`` is served at TP 2 and generates
exactly what vLLM's stock AWQ path generates from the original checkpoint at TP 2, each worker
opening only its own rank's member and reading only that member's tensors; the single file
served at TP 2 (each worker cutting its shard with the project's tensor-parallel rules) does
too.  The model is the example Llama of ``reference.examples`` (hidden 256, intermediate 512,
4 heads, 2 kv heads, vocabulary 512): the real fixtures are too small to cut in two under
Marlin's shape rules (their k_proj has 64 outputs), which ``convert --tp 2`` refuses
(``TP_BAD_SHARD``)."""

from __future__ import annotations

import json

import pytest
from serving import convert, generate, needs_stock_4bit

from reference.examples import LlamaShape, write_checkpoint
from reference.format.reader import Reader
from reference.sets.setmanifest import read_manifest

pytestmark = needs_stock_4bit


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2")
    v1 = write_checkpoint(tmp / "v1", LlamaShape())
    single = convert(v1, tmp / "file")
    ranked = convert(v1, tmp / "tp2", "--tp", "2")
    split = convert(v1, tmp / "split", "--max-shard-size", "1MB")
    reports = tmp / "reports"
    reports.mkdir()
    ours = {"rank set": ranked, "file": single, "split set": split}
    jobs = [{"name": "stock", "model": str(v1), "quantization": None, "tp": 2}] + [
        {"name": name, "model": str(path), "quantization": "awq_v2", "tp": 2}
        for name, path in ours.items()
    ]
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "AWQ2_VLLM_LOAD_REPORT": str(reports)}
    got = generate(jobs, tmp, env)
    got["reports"] = [json.loads(p.read_text()) for p in sorted(reports.glob("*.json"))]
    got["ranked"], got["split"] = ranked, split
    return got


def test_a_rank_set_at_tp_2_generates_what_vllm_generates(tp2):
    stock, ours = tp2["results"]["stock"], tp2["results"]["rank set"]
    equal = ours["tokens"] == stock["tokens"]
    print(
        f"\nexample Llama, path awq_v2 rank set, TP 2: tokens equal {equal}, logprobs equal "
        f"{ours['logprobs'] == stock['logprobs']}"
    )
    assert all(len(t) == 16 for t in stock["tokens"])
    assert ours["tokens"] == stock["tokens"] and ours["logprobs"] == stock["logprobs"]


def test_the_single_file_at_tp_2_generates_what_vllm_generates(tp2):
    stock, ours = tp2["results"]["stock"], tp2["results"]["file"]
    assert ours["tokens"] == stock["tokens"] and ours["logprobs"] == stock["logprobs"]


def test_a_split_set_at_tp_2_generates_what_vllm_generates(tp2):
    """Each worker reads the split set's members and cuts its shard, as from a single file
    (before, a worker of rank 1 asked the split set for a rank 1 it does not have)."""
    assert len(list(tp2["split"].glob("*.awq2"))) > 1
    stock, ours = tp2["results"]["stock"], tp2["results"]["split set"]
    assert ours["tokens"] == stock["tokens"] and ours["logprobs"] == stock["logprobs"]


def test_each_worker_opens_and_reads_only_its_rank(tp2):
    manifest = read_manifest(tp2["ranked"] / "model.awq2.set.json")
    reports = [r for r in tp2["reports"] if r["kind"] == "rank"]
    assert sorted(r["tp_rank"] for r in reports) == [0, 1]
    for report in reports:
        own = sorted(m.name for m in manifest.members if m.rank == report["tp_rank"])
        with Reader(tp2["ranked"] / own[0]) as member:
            payload = sum(e.length for e in member.entries())
            count = len(member)
        print(
            f"\nrank {report['tp_rank']}: opened {report['files']} ({report['file_bytes']} "
            f"bytes), read {report['tensors_read']} tensors, {report['bytes_read']} bytes "
            f"(the member's payloads: {count} tensors, {payload} bytes)"
        )
        assert report["files"] == own and len(own) == 1
        assert report["tensors_read"] == count and report["bytes_read"] == payload
    files = [r for r in tp2["reports"] if r["kind"] == "file"]
    assert sorted(r["tp_rank"] for r in files) == [0, 1]
    assert all(r["files"] == ["model.awq2"] for r in files)
