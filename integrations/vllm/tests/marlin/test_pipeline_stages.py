"""Pipeline parallelism at the parameter level: each stage of the tiny Llama (four layers),
built by the plugin, equals that stage built by vLLM's own AWQ path, and reads only its own
tensors.

Four processes on gloo (vLLM's CPU platform) run ``pp_worker.py``: first TP=2 x PP=2 (global
rank = pp_rank * 2 + tp_rank, vLLM's layout), served from one file and from a rank set cut for
TP 2 (``convert --tp 2``); then ranks 0 and 1 again as PP=2 (TP 1), from the one file.  The
split of the layers is vLLM's (``get_pp_indices`` in the worker); the expected tensors of a
stage are computed here from the file's index and that split, and compared with the load
report (``AWQ2_VLLM_LOAD_REPORT``: it counts the tensors and bytes read, it does not name
them)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import awq_reference
import pytest

import reference
from reference.examples import LlamaShape, write_checkpoint
from reference.sets.setmanifest import read_manifest
from spec.constants import SET_MANIFEST

WORLD = 4
LAYOUTS = {"tp2xpp2": (2, 2, ("one", "tp2")), "pp2": (1, 2, ("one",))}


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """Every (layout, global rank) result of the workers, and the folders they served."""
    tmp = tmp_path_factory.mktemp("pp")
    v1 = write_checkpoint(tmp / "v1", LlamaShape(num_hidden_layers=4))  # no biases (o_proj)
    folders = {"one": tmp / "one", "tp2": tmp / "tp2"}
    for name, extra in (("one", []), ("tp2", ["--tp", "2"])):
        subprocess.run([sys.executable, "-m", "reference.convert", str(v1),
                        f"{folders[name]}/", "--quiet", *extra], check=True)  # fmt: skip
    out = tmp / "out"
    out.mkdir()
    worker = Path(__file__).parent / "pp_worker.py"
    port = awq_reference.ports() + 23
    layouts = [f"{tp}x{pp}:" + ",".join(str(folders[f]) for f in served)
               for tp, pp, served in LAYOUTS.values()]  # fmt: skip
    procs = [subprocess.Popen([sys.executable, str(worker), str(v1), str(out), str(rank),
                               str(port), *layouts]) for rank in range(WORLD)]  # fmt: skip
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0] * WORLD, codes
    results: dict[str, list[dict]] = {name: [] for name in LAYOUTS}
    for rank in range(WORLD):
        for result in json.loads((out / f"{rank}.json").read_text()):
            name = next(n for n, (tp, pp, _) in LAYOUTS.items()
                        if (tp, pp) == (result["tp"], result["pp"]))  # fmt: skip
            results[name].append(result)
    return results, folders


def own_files(folder: Path, tp_rank: int) -> list[str]:
    """The members a worker of ``tp_rank`` reads: a rank set's members of that rank, from its
    manifest; the one file."""
    if not (folder / SET_MANIFEST).is_file():
        return ["model.awq2"]
    members = read_manifest(folder / SET_MANIFEST).members
    return sorted(m.name for m in members if m.rank == tp_rank)


def stage_tensors(folder: Path, tp_rank: int, stage: dict) -> dict[str, int]:
    """Name -> stored length of every tensor this stage's worker should read: those of the
    layers in vLLM's range for it, and the other tensors of the modules it builds (those under
    no module vLLM made a ``PPMissingLayer``)."""
    rank_set = (folder / SET_MANIFEST).is_file()
    with reference.open(folder, rank=tp_rank if rank_set else None) as f:
        entries = f.entries(rank=tp_rank) if rank_set else f.entries()
    start, end = stage["layers"]
    out = {}
    for e in entries:
        m = re.match(r"model\.layers\.(\d+)\.", e.name)
        if m:
            mine = start <= int(m.group(1)) < end
        else:
            mine = not any(e.name.startswith(f"{gone}.") for gone in stage["stock_missing"])
        if mine:
            out[e.name] = e.length
    return out


def expected_missing(stage: dict) -> list[str]:
    """vLLM's layout of a stage: the layers outside its range, the embedding on all but the
    first stage, the final norm and lm_head on all but the last."""
    start, end = stage["layers"]
    gone = [f"model.layers.{i}" for i in range(stage["num_layers"]) if not start <= i < end]
    gone += [] if stage["first"] else ["model.embed_tokens"]
    gone += [] if stage["last"] else ["model.norm", "lm_head"]
    return sorted(gone)


def check_layout(name: str, results: list[dict], folders: dict[str, Path]) -> None:
    tp, pp, served = LAYOUTS[name]
    assert sorted((r["pp_rank"], r["tp_rank"]) for r in results) == [
        (p, t) for p in range(pp) for t in range(tp)
    ]
    for r in results:  # vLLM's global rank: pp_rank * tp_size + tp_rank
        assert r["rank"] == r["pp_rank"] * tp + r["tp_rank"], r
    ranges = sorted({tuple(r["layers"]) for r in results})
    assert len(ranges) == pp and all(a < b for a, b in ranges)
    assert [i for a, b in ranges for i in range(a, b)] == list(range(results[0]["num_layers"]))
    table = []
    for r in sorted(results, key=lambda r: (r["pp_rank"], r["tp_rank"])):
        assert r["stock_missing"] == expected_missing(r), r
        for built in r["built"]:
            folder = Path(built["served"])
            report, rows = built["report"], built["rows"]
            assert built["missing"] == r["stock_missing"]
            want = stage_tensors(folder, r["tp_rank"], r)
            mine = own_files(folder, r["tp_rank"])
            equal = sum(1 for row in rows if row[1])
            table.append([name, folder.name, r["pp_rank"], r["tp_rank"], f"{r['layers']}",
                          len(rows), equal, report["tensors_read"], len(want),
                          report["bytes_read"], sum(want.values()), report["file_bytes"],
                          ",".join(report["files"])])  # fmt: skip
            assert all(row[1] for row in rows), [row for row in rows if not row[1]]
            assert (report["tp_rank"], report["tp_size"]) == (r["tp_rank"], tp)
            assert report["files"] == mine
            read = (report["tensors_read"], report["bytes_read"])
            assert read == (len(want), sum(want.values())), (r["rank"], folder.name, report)
            # what the process opened of the folder while vLLM built and loaded the stage: its
            # own members (and a rank set's manifest), never another rank's
            assert set(built["opened_at_load"]) <= {*mine, SET_MANIFEST}, built
            assert set(mine) <= set(built["opened_at_load"])
            # at configuration time (``maybe_update_config``) the plugin reads the layers'
            # facts from rank 0's members' index (no payload): nothing else
            rank0 = own_files(folder, 0)
            assert set(built["opened_at_config"]) <= {*mine, *rank0, SET_MANIFEST, "config.json"}
    # the stages of one pipeline read every tensor of the file between them, none twice
    for source in served:
        folder = folders[source]
        for t in range(tp):
            parts = [set(stage_tensors(folder, t, r)) for r in results if r["tp_rank"] == t]
            kw = {"rank": t} if source == "tp2" else {}
            with reference.open(folder, rank=kw.get("rank")) as f:
                assert set().union(*parts) == set(f.names(**kw))
            assert sum(map(len, parts)) == len(set().union(*parts))
    heads = ["layout", "from", "stage", "tp", "layers", "params", "equal", "tensors",
             "(want)", "bytes_read", "(want)", "file_bytes", "files"]  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *table, strict=True)]
    print()
    for row in [heads, *table]:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths, strict=True)))


def test_pp2_stages_equal_vllm_and_read_only_their_layers(stages):
    results, folders = stages
    check_layout("pp2", results["pp2"], folders)


def test_tp2_pp2_stages_equal_vllm_and_read_only_their_layers(stages):
    results, folders = stages
    check_layout("tp2xpp2", results["tp2xpp2"], folders)
