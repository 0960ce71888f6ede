"""Seeds and mutators of AWQ v1 inputs: checkpoint folders.

``reference.open`` reads a folder, or a file that starts like safetensors (u64 length, then
``{``), as an AWQ v1 checkpoint, with config.json or quant_config.json from its folder [V1-1].
:func:`lay_out` makes a seed a folder (``Mutant.files``): one ``model.safetensors`` or 2-3
shards with ``model.safetensors.index.json``, and ``config.json`` (``quantization_config``),
the legacy ``quant_config.json``, both or neither.  The mutators: edits of a shard's JSON
header (the length prefix follows), reshapes that keep the payloads consistent, byte-level
edits of a shard, edits of the quantisation fields of config.json, the JSON mutators of
:mod:`tools.fuzz.jsontext` on every JSON file, and files removed, emptied, copied or added.
"""

from __future__ import annotations

import functools
import json
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reference.examples import LlamaShape, write_checkpoint
from spec.registry import DTYPES
from tools.fixtures.real_checkpoints import FIXTURES
from tools.fuzz import jsontext
from tools.fuzz.jsontext import CONFIG, INDEX, JSON_FILES, QUANT_CONFIG
from tools.fuzz.mutant import Mutant, Seed, bitflip, extend, overwrite, truncate
from tools.vectors.surgery import FileEditor


def st_split(data: bytes | bytearray) -> tuple[Any, bytes] | None:
    """(parsed JSON header, data buffer) of a safetensors file, or None."""
    if len(data) < 8:
        return None
    (length,) = struct.unpack_from("<Q", data)
    if length > len(data) - 8:
        return None
    try:
        return json.loads(bytes(data[8 : 8 + length])), bytes(data[8 + length :])
    except (ValueError, RecursionError):  # a header nested past Python's own limit
        return None


def st_join(header: Any, buffer: bytes) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + buffer


ST_VALUES: dict[str, tuple[Any, ...]] = {
    "dtype": (
        "F16",
        "BF16",
        "I32",
        "F32",
        "F64",
        "BOOL",
        "U8",
        "F8_E4M3",
        "XX",
        1,
        None,
        [],
        {"a": 1},
    ),
    "shape": ([], [0], [-1], [1 << 63], [1 << 64], [1.5], "ab", [[1]], [True], [0, 1 << 63], None),
    "data_offsets": (
        [-1, 2],
        [0, 1 << 64],
        [0, 1 << 63],
        "xy",
        [0],
        [0, 2, 4],
        [1.5, 2],
        None,
        [True, 2],
    ),
}


ST_SHAPES: tuple[list[int], ...] = (
    [0, 1 << 63], [0, (1 << 64) - 1], [0, (1 << 62) + 1], [1 << 62, 0, 2], [1, 0],
    [0], [], [1], [2, 2, 2, 2, 2, 2, 2, 2, 2],
)  # fmt: skip


def _st_reshape(m: Mutant, header: dict[str, Any], buffer: bytes, name: str) -> bytes | None:
    """A new shape for one tensor; its payload is cut or zero-padded to fit and the later
    payloads move with it, so the file stays consistent (like _dim_value's length follows).
    Returns the new data buffer, or None when the entry is not one to reshape."""
    spec = header[name]
    d = next((d for d in DTYPES if isinstance(spec, dict) and d.name == spec.get("dtype")), None)
    offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
    if d is None or not (isinstance(offsets, list) and len(offsets) == 2):
        return None
    start, end = offsets
    if not (type(start) is int and type(end) is int and 0 <= start <= end <= len(buffer)):
        return None
    shape = list(m.rng.choice(ST_SHAPES))
    count = 1
    for v in shape:
        count *= v
    length = count * d.itemsize
    if length - (end - start) > 1 << 20:
        return None
    payload = (buffer[start:end] + bytes(max(0, length - (end - start))))[:length]
    grow = length - (end - start)
    for other in header.values():
        o = other.get("data_offsets") if isinstance(other, dict) else None
        if other is not spec and isinstance(o, list) and o and all(type(v) is int for v in o):
            other["data_offsets"] = [v + grow if v >= end else v for v in o]
    spec["shape"] = shape
    spec["data_offsets"] = [start, start + length]
    m.steps.append(f"{name}.shape = {shape}, payload and later offsets follow")
    return buffer[:start] + payload + buffer[end:]


def _st_header(m: Mutant) -> None:
    """A structure-aware edit of the safetensors JSON header; the length prefix follows."""
    parsed = st_split(m.data)
    if parsed is None:
        return overwrite(m)
    header, buffer = parsed
    rng = m.rng
    names = [k for k in header if k != "__metadata__"] if isinstance(header, dict) else []
    how = rng.randrange(9)
    if not names or how == 0:
        header = rng.choice(([], 1, {}, "x", {"__metadata__": {}}, None))
        m.steps.append(f"safetensors header = {header!r}")
    elif how == 1:
        header["__metadata__"] = rng.choice(([1], {"a": 1}, "x", None, {"format": "pt"}))
        m.steps.append(f"__metadata__ = {header['__metadata__']!r}")
    elif how == 2:
        name = rng.choice(names)
        new = rng.choice(("qweight", "scales", "qzeros", "bias", "weight", ""))
        header[name.rpartition(".")[0] + "." + new] = header.pop(name)
        m.steps.append(f"rename {name} -> ...{new}")
    elif how == 3:
        name = rng.choice(names)
        header[name] = rng.choice((1, None, [], "x", {}))
        m.steps.append(f"{name} = {header[name]!r}")
    elif how == 4 and (reshaped := _st_reshape(m, header, buffer, rng.choice(names))):
        buffer = reshaped
    else:
        name = rng.choice(names)
        spec = header[name] if isinstance(header[name], dict) else {}
        key = rng.choice(tuple(ST_VALUES))
        current = spec.get(key)
        if rng.random() < 0.1:
            spec.pop(key, None)
            m.steps.append(f"{name}.{key} removed")
        else:
            values: list[Any] = list(ST_VALUES[key])
            if isinstance(current, list) and all(type(v) is int for v in current):
                values += [
                    current[::-1],
                    [v + 1 for v in current],
                    [v * 2 for v in current],
                    current[:-1],
                    [*current, 1],
                    [v - 1 for v in current],
                ]
            spec[key] = rng.choice(values)
            m.steps.append(f"{name}.{key} = {spec[key]!r} (was {current!r})")
        header[name] = spec
    try:
        m.ed.data = bytearray(st_join(header, buffer))
    except (ValueError, RecursionError):
        return overwrite(m)
    m.structured = True
    return None


CONFIG_VALUES: dict[str, tuple[Any, ...]] = {
    "bits": (3, 4, 8, 4.0, "4", None, True, 16, -4),
    "group_size": (0, -1, -2, 7, 64, 128, 128.0, "128", True, None, 1 << 40),
    "zero_point": (False, None, 0, "no"),
    "version": ("gemv", "GEMM", 1, None, "marlin"),
    "quant_method": ("gptq", None, 5, "AWQ"),
    "modules_to_not_convert": (None, "lm_head", [1], ["model"], [""], {}, ["q_proj"]),
}


def _config(m: Mutant) -> None:
    """Edit config.json of an AWQ v1 input: quantisation fields and hidden_size."""
    try:
        config = json.loads(m.files.get(CONFIG, b"{}"))
    except (ValueError, RecursionError):
        config = {}
    rng = m.rng
    how = rng.randrange(6)
    if how == 0 or not isinstance(config, dict):
        config = rng.choice(([], 1, {}, {"quantization_config": 1}, "x"))
        m.steps.append(f"config.json: (document) = {config!r}")
    elif how == 1:
        config["hidden_size"] = rng.choice((0, "x", 1.5, None, 64, 1 << 63))
        m.steps.append(f"config.json: hidden_size = {config['hidden_size']!r}")
    else:
        q = config.get("quantization_config")
        q = q if isinstance(q, dict) else {}
        key = rng.choice(tuple(CONFIG_VALUES))
        q[key] = rng.choice(CONFIG_VALUES[key])
        config["quantization_config"] = q
        m.steps.append(f"config.json: quantization_config.{key} = {q[key]!r}")
    m.files[CONFIG] = json.dumps(config).encode()
    m.structured = True


# --------------------------------------------------------------------------- the folder


def _shards(m: Mutant) -> list[str]:
    return sorted(n for n in m.files if n.endswith(".safetensors"))


def _on_shard(mutator: Callable[[Mutant], Any]) -> Callable[[Mutant], None]:
    """``mutator`` (which edits ``m.ed``) applied to one safetensors file of the folder; its
    steps name the file."""

    def on_shard(m: Mutant) -> None:
        shards = _shards(m)
        if not shards:
            return
        name = m.rng.choice(shards)
        m.ed = FileEditor(m.files[name])
        first = len(m.steps)
        mutator(m)
        m.files[name] = bytes(m.ed.data)
        m.steps[first:] = [f"{name}: {s}" for s in m.steps[first:]]

    on_shard.__name__ = mutator.__name__
    return on_shard


def _pick_json(m: Mutant) -> str:
    """A JSON file of the folder; now and then one that is absent (it is then created)."""
    present = [n for n in JSON_FILES if n in m.files]
    if not present or m.rng.random() < 0.15:
        return m.rng.choice(JSON_FILES)
    return m.rng.choice(present)


def _json(m: Mutant) -> None:
    """A structure-aware edit of config.json, quant_config.json or the shard index, or
    (one time in six) of a shard's JSON header [jsontext]."""
    if m.rng.random() < 1 / 6:
        return _on_shard(_st_json)(m)
    name = _pick_json(m)
    raw = m.files.get(name) or _DEFAULTS[name]
    m.files[name], step = jsontext.structured(m.rng, name, raw, sorted(m.files))
    m.steps.append(f"{name}: {step}")
    m.structured = True
    return None


def _st_json(m: Mutant) -> None:
    done = jsontext.st_header_edit(m.rng, bytes(m.data), jsontext.structured)
    if done is None:
        return overwrite(m)
    m.ed.data = bytearray(done[0])
    m.steps.append(f"header {done[1]}")
    m.structured = True
    return None


def _json_bytes(m: Mutant) -> None:
    """A byte-level edit of a JSON file's text."""
    name = _pick_json(m)
    m.files[name], step = jsontext.bytes_edit(m.rng, m.files.get(name) or _DEFAULTS[name])
    m.steps.append(f"{name}: {step}")


def _folder(m: Mutant) -> None:
    """The folder's files: one removed, emptied, copied under another name, or a stray one."""
    rng = m.rng
    names = sorted(m.files)
    how = rng.randrange(4)
    if how == 0 and names:
        name = rng.choice(names)
        del m.files[name]
        m.steps.append(f"remove {name}")
    elif how == 1 and names:
        name = rng.choice(names)
        m.files[name] = b""
        m.steps.append(f"empty {name}")
    elif how == 2 and names:
        name = rng.choice(names)
        new = rng.choice(("model.safetensors", "model-00001-of-00002.safetensors",
                          "model-00003-of-00003.safetensors", *JSON_FILES))  # fmt: skip
        m.files[new] = m.files[name]
        m.steps.append(f"copy {name} to {new}")
    else:
        name = rng.choice(("model.safetensors", "extra.safetensors", *JSON_FILES))
        m.files[name] = rng.choice((b"{}", b"\x00" * 8, b"\x08" + bytes(7) + b"{}      "))
        m.steps.append(f"stray {name} = {m.files[name]!r}")


MUTATORS: tuple[tuple[Callable[[Mutant], Any], float], ...] = (
    (_on_shard(bitflip), 8),
    (_on_shard(overwrite), 8),
    (_on_shard(truncate), 4),
    (_on_shard(extend), 2),
    (_on_shard(_st_header), 35),
    (_config, 8),
    (_json, 45),
    (_json_bytes, 10),
    (_folder, 5),
)
FUNCS = [f for f, _ in MUTATORS]
WEIGHTS = [w for _, w in MUTATORS]

_DEFAULTS = {
    CONFIG: b"{}",
    QUANT_CONFIG: b'{"w_bit": 4, "q_group_size": 64, "zero_point": true, "version": "gemm"}',
    INDEX: b'{"metadata": {}, "weight_map": {}}',
}


@functools.lru_cache(maxsize=8)
def sharded(data: bytes, count: int) -> tuple[tuple[str, bytes], ...]:
    """A single safetensors file split into ``count`` shards ``model-0000N-of-0000M`` and
    their ``model.safetensors.index.json``, as ``reference.examples.write_checkpoint`` lays
    them out."""
    parsed = st_split(data)
    assert parsed is not None
    header, buffer = parsed
    names = [k for k in header if k != "__metadata__"]
    per = -(-len(names) // count)
    files, weight_map, total = [], {}, 0
    for s in range(count):
        shard = f"model-{s + 1:05d}-of-{count:05d}.safetensors"
        part: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        payload = b""
        for name in names[s * per : (s + 1) * per]:
            start, end = header[name]["data_offsets"]
            raw = buffer[start:end]
            part[name] = dict(header[name], data_offsets=[len(payload), len(payload) + len(raw)])
            payload += raw
            weight_map[name] = shard
        total += len(payload)
        files.append((shard, st_join(part, payload)))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files.append((INDEX, (json.dumps(index, indent=2) + "\n").encode()))
    return tuple(files)


def _legacy_config(config: bytes) -> tuple[bytes, bytes]:
    """(config.json without quantization_config, quant_config.json of AutoAWQ's old form)."""
    doc = json.loads(config)
    q = doc.pop("quantization_config", None) or {}
    legacy = {
        "w_bit": q.get("bits", 4),
        "q_group_size": q.get("group_size", 64),
        "zero_point": q.get("zero_point", True),
        "version": str(q.get("version", "gemm")).upper(),
    }
    return json.dumps(doc, indent=2).encode(), json.dumps(legacy, indent=2).encode()


def lay_out(m: Mutant, base: Seed) -> tuple[str, ...]:
    """Lay an AWQ v1 seed out as a checkpoint folder in ``m.files``: a single
    ``model.safetensors`` or 2-3 shards with their index, and ``config.json`` with
    ``quantization_config``, or the legacy ``quant_config.json``, both, or neither.  Returns
    what the reader path opens: the file and the folder (``"."``), or the folder alone."""
    rng = m.rng
    assert base.config is not None
    how = rng.choices(("file", "folder", "sharded"), (30, 20, 50))[0]
    if how == "sharded":
        m.files.update(sharded(base.data, rng.choice((2, 3))))
    else:
        m.files["model.safetensors"] = base.data
    style = rng.choices(("config", "legacy", "both", "none"), (55, 30, 10, 5))[0]
    config, legacy = _legacy_config(base.config)
    if style in ("config", "both"):
        m.files[CONFIG] = base.config
    if style in ("legacy", "both"):
        m.files[QUANT_CONFIG] = legacy
        if style == "legacy" and rng.random() < 0.7:
            m.files[CONFIG] = config
    m.steps.append(f"laid out: {how}, {style} config ({len(_shards(m))} safetensors files)")
    return ("model.safetensors", ".") if how == "file" else (".",)


def v1_seeds() -> list[Seed]:
    """The legacy seeds: a tiny AutoAWQ Llama checkpoint, dense tensors of every dtype, and
    :func:`real_seeds`."""
    shape = LlamaShape(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=32,
        group_size=64,
        attention_bias=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_checkpoint(Path(tmp) / "ckpt", shape)
        llama = (folder / "model.safetensors").read_bytes()
        config = (folder / "config.json").read_bytes()
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    buffer = b""
    rng = np.random.default_rng(5)
    for d in DTYPES:
        raw = rng.integers(0, 256, 6 * d.itemsize, dtype=np.uint8).tobytes()
        header[f"dense.{d.name}"] = {
            "dtype": d.name,
            "shape": [2, 3],
            "data_offsets": [len(buffer), len(buffer) + len(raw)],
        }
        buffer += raw
    dense = st_join(header, buffer)
    out = []
    for sid, data, cfg in (("v1_llama", llama, config), ("v1_dense", dense, b"{}")):
        out.append(_seed(sid, data, cfg))
    return out + real_seeds()


#: Checkpoints the real quantisers wrote (``tests/fixtures/real/``, issue 14): a
#: compressed-tensors ``pack-quantized`` one of each kind the reader takes (asymmetric with
#: zero points packed along the output dimension, symmetric without) and AutoAWQ's own GEMM.
REAL_SEEDS = ("ct_awq_w4a16_asym_g128", "ct_w4a16_sym_g128", "autoawq_gemm_g128")


def real_seeds() -> list[Seed]:
    """The :data:`REAL_SEEDS` fixtures: ``model.safetensors`` and ``config.json`` as written."""
    return [
        _seed(
            f"real_{name}",
            (FIXTURES / name / "model.safetensors").read_bytes(),
            (FIXTURES / name / CONFIG).read_bytes(),
        )
        for name in REAL_SEEDS
    ]


def _seed(sid: str, data: bytes, config: bytes) -> Seed:
    parsed = st_split(data)
    names = tuple(k for k in parsed[0] if k != "__metadata__") if parsed else ()
    return Seed(sid, data, names, 8.0, config)
