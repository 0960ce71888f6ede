"""Cutting a model into tensor-parallel ranks: which tensors split, and how [SET-11, SET-12].

The rank-set writer (``python -m reference.convert SRC DST/ --tp T``) stores in rank ``r``'s file
the part of every tensor that rank ``r`` of an engine holds.  How each module splits depends on
the architecture, so it comes from a small rule table per architecture family (:data:`FAMILIES`),
chosen by ``config.json``'s ``architectures`` (:data:`ARCHITECTURES`) and overridable by the
user.  A rule maps a module (a tensor's name without its last part, such as
``model.layers.0.self_attn.q_proj``) to one of these kinds, each stated as vLLM splits it:

``column``
    output features split evenly (a quantised layer's ``n``; a dense ``weight[out, in]``'s rows,
    and its bias).
``row``
    input features split evenly (``k``; a dense weight's columns); the bias is whole on every
    rank (added once, after the reduction).
``heads``
    query heads: ``column``, and ``T`` must divide the number of heads.
``kv_heads``
    key/value heads: ``column`` in whole heads when ``T`` divides their number; when ``T`` is a
    multiple of it instead, head ``r // (T / kv_heads)`` whole on rank ``r`` (each head
    replicated on ``T / kv_heads`` consecutive ranks) [SET-12].
``vocab``
    a vocabulary table ``[vocab, hidden]``: rows padded with zeros to a multiple of
    :data:`VOCAB_PADDING`, then split evenly [SET-12].
``replicated``
    whole on every rank.

A dense tensor no rule names is replicated.  A quantised layer no rule names is refused
(``TP_NO_RULE``): a layer copied whole to every rank is a choice to state with a rule.
Everything is checked from the shapes before anything is written: a cut that does not divide,
or a shard that breaks Marlin's shape rules, is refused with the layer named (``TP_BAD_SHARD``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np
from numpy.typing import NDArray

from reference.format.layers import LinearLayer, StoredTensor, shard
from reference.format.metadata import lexical_depth
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from spec.constants import VOCAB_PADDING
from spec.marlin import marlin_shape_ok, pack_factor

#: The longest --tp-rules file read (a rule table is a few lines).
MAX_RULES_FILE = 1 << 20

KINDS = ("column", "row", "heads", "kv_heads", "vocab", "replicated")
Kind = Literal["column", "row", "heads", "kv_heads", "vocab", "replicated"]

_LLAMA: tuple[tuple[str, Kind], ...] = (
    (r"(.+\.)?embed_tokens", "vocab"),
    (r"lm_head", "vocab"),
    (r".+\.self_attn\.q_proj", "heads"),
    (r".+\.self_attn\.[kv]_proj", "kv_heads"),
    (r".+\.self_attn\.o_proj", "row"),
    (r".+\.mlp\.(gate|up)_proj", "column"),
    (r".+\.mlp\.down_proj", "row"),
)
_MIXTRAL: tuple[tuple[str, Kind], ...] = (
    *_LLAMA,
    (r".+\.block_sparse_moe\.experts\.[0-9]+\.w[13]", "column"),
    (r".+\.block_sparse_moe\.experts\.[0-9]+\.w2", "row"),
    (r".+\.block_sparse_moe\.gate", "replicated"),
)

#: The rule tables: (pattern matched against the whole module name, kind); first match wins.
FAMILIES: dict[str, tuple[tuple[str, Kind], ...]] = {"llama": _LLAMA, "mixtral": _MIXTRAL}

#: ``config.json`` ``architectures[0]`` -> rule table.  Llama, Mistral, Qwen2 and Qwen3 name
#: their modules alike (Qwen2 adds q/k/v biases, Qwen3 the replicated q_norm and k_norm).
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "Qwen3ForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
}


@dataclass(frozen=True)
class Cut:
    """What one rank holds of one module: the ``index``-th of ``count`` equal parts along
    ``parallel`` (``None``: the whole); ``pad_to`` rows of zeros first (vocabulary tables)."""

    parallel: Literal["column", "row"] | None
    index: int = 0
    count: int = 1
    pad_to: int = 0


def _refuse(code: str, message: str, *, expected: Any, found: Any) -> FormatError:
    return error(code, message, expected=expected, found=found)


@dataclass(frozen=True)
class Heads:
    """Attention geometry from ``config.json``."""

    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Heads | None:
        """``num_attention_heads``, ``num_key_value_heads`` (default: the heads) and
        ``head_dim`` (default ``hidden_size // num_attention_heads``); None without heads."""
        heads = config.get("num_attention_heads")
        if not _count(heads):
            return None
        kv = config.get("num_key_value_heads") or heads
        hidden = config.get("hidden_size")
        head_dim = config.get("head_dim") or (hidden // heads if _count(hidden) else None)
        if not _count(kv) or not _count(head_dim):
            return None
        return cls(heads, kv, head_dim)


def _count(value: Any) -> TypeGuard[int]:
    """A positive integer (a JSON ``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class SplitPlan:
    """How every module of one model splits over ``tp_size`` ranks."""

    def __init__(
        self,
        tp_size: int,
        rules: Sequence[tuple[str, str]],
        *,
        family: str | None,
        heads: Heads | None,
    ) -> None:
        if tp_size < 1:
            raise ValueError(f"tp_size must be at least 1, got {tp_size}")
        for pattern, kind in rules:
            if kind not in KINDS:
                raise ValueError(f"rule {pattern!r}: kind {kind!r} is not one of {KINDS}")
        self.tp_size, self.family, self.heads = tp_size, family, heads
        self.rules = [(pattern, kind) for pattern, kind in rules]
        self._compiled = [(re.compile(p), k) for p, k in self.rules]

    def kind(self, module: str) -> str | None:
        """The kind of the first rule whose pattern matches the whole module name."""
        for pattern, kind in self._compiled:
            if pattern.fullmatch(module):
                return kind
        return None

    def description(self) -> dict[str, Any]:
        """What every rank file's metadata records of the split (the same in every rank)."""
        described: dict[str, Any] = {"tp_size": self.tp_size, "rule_family": self.family,
                                     "rules": [list(r) for r in self.rules],
                                     "vocab_padding": VOCAB_PADDING}  # fmt: skip
        if self.heads is not None:
            described.update(num_attention_heads=self.heads.heads,
                             num_key_value_heads=self.heads.kv_heads,
                             head_dim=self.heads.head_dim)  # fmt: skip
        return described

    # -------------------------------------------------------------- cuts, from shapes alone

    def cuts(self, module: str, *, out_features: int, quantised: bool) -> list[Cut]:
        """Rank ``r``'s cut of ``module`` at index ``r``; refuses a kind that cannot apply."""
        kind = self.kind(module)
        t = self.tp_size
        if kind is None:
            if quantised:
                raise _refuse("TP_NO_RULE", f"{module}: no tensor-parallel rule names this "
                              "quantised layer (add one with --tp-rules)",
                              expected="a rule of the table", found="none")  # fmt: skip
            kind = "replicated"
        if kind == "replicated":
            return [Cut(None)] * t
        if kind in ("column", "row"):
            return [Cut(kind, r, t) for r in range(t)]  # type: ignore[arg-type]
        if kind == "vocab":
            if quantised:
                raise _refuse("TP_BAD_SHARD", f"{module}: a quantised vocabulary table cannot "
                              "be padded and split", expected="a dense table",
                              found="a quantised layer")  # fmt: skip
            padded = -(-out_features // VOCAB_PADDING) * VOCAB_PADDING
            if padded % t:
                raise _refuse("TP_BAD_SHARD", f"{module}: {padded} padded vocabulary rows do "
                              f"not split over {t} ranks", expected=f"{t} divides {padded}",
                              found=padded % t)  # fmt: skip
            return [Cut("column", r, t, padded) for r in range(t)]
        return self._head_cuts(module, kind, out_features)

    def _head_cuts(self, module: str, kind: str, out_features: int) -> list[Cut]:
        t, heads = self.tp_size, self.heads
        if heads is None:
            raise _refuse("TP_BAD_CONFIG", f"{module}: splitting attention heads needs "
                          "num_attention_heads in config.json", expected="the head counts",
                          found="none")  # fmt: skip
        count = heads.heads if kind == "heads" else heads.kv_heads
        if out_features != count * heads.head_dim:
            raise _refuse("TP_BAD_CONFIG", f"{module}: {out_features} output features are not "
                          f"{count} heads of {heads.head_dim}",
                          expected=count * heads.head_dim, found=out_features)  # fmt: skip
        if count % t == 0:
            return [Cut("column", r, t) for r in range(t)]
        if kind == "kv_heads" and t % count == 0:
            replicas = t // count  # [SET-12]
            return [Cut("column", r // replicas, count) for r in range(t)]
        wanted = f"{t} divides {count}"
        if kind == "kv_heads":
            wanted += f", or {count} divides {t}"
        raise _refuse("TP_BAD_SHARD", f"{module}: {count} heads do not split over {t} ranks",
                      expected=wanted, found=f"{count} heads")  # fmt: skip

    def check_layer(self, prefix: str, *, family: str, k: int, n: int, bits: int,
                    group_size: int) -> list[Cut]:  # fmt: skip
        """The cuts of a quantised layer, refused unless each shard is storable as its layout
        family stores the whole layer (a Marlin layer's shards pass Marlin's shape rules)."""
        cuts = self.cuts(prefix, out_features=n, quantised=True)
        for cut in cuts:
            if cut.parallel is None:
                continue
            size = k if cut.parallel == "row" else n
            part = size // cut.count
            ks, ns = (part, n) if cut.parallel == "row" else (k, part)
            if family == "MARLIN":
                ok = size % cut.count == 0 and marlin_shape_ok(ks, ns, bits, group_size)
                rule = "Marlin's shape rules (n % 64, k % 128, group size divides k)"
            elif cut.parallel == "column":
                ok = size % (cut.count * pack_factor(bits)) == 0
                rule = "whole packed words per rank"
            else:
                ok = size % cut.count == 0 and (group_size == -1 or part % group_size == 0)
                rule = "whole groups per rank"
            if not ok:
                raise _refuse("TP_BAD_SHARD", f"{prefix}: its {cut.parallel}-parallel shard "
                              f"over {cut.count} ranks (k = {ks}, n = {ns}) breaks {rule}",
                              expected=f"a {family} shard", found=f"k = {k}, n = {n}, "
                              f"group_size = {group_size}, bits = {bits}")  # fmt: skip
        return cuts

    def check_dense(self, name: str, shape: tuple[int, ...]) -> list[Cut]:
        """The cuts of a dense tensor, refused unless each divides its axis evenly."""
        module = name.rpartition(".")[0]
        cuts = self.cuts(module, out_features=shape[0] if shape else 0, quantised=False)
        for cut in cuts:
            axis = _dense_axis(cut, len(shape))
            if axis is None:
                continue
            size = cut.pad_to or shape[axis]
            if size % cut.count:
                raise _refuse("TP_BAD_SHARD", f"{name}: axis {axis} of {shape[axis]} does not "
                              f"split over {cut.count} ranks",
                              expected=f"a multiple of {cut.count}", found=shape[axis])  # fmt: skip
        return cuts


def _dense_axis(cut: Cut, ndim: int) -> int | None:
    """The axis a dense tensor splits along: column -> 0 (a weight's rows, a bias); row -> 1
    (a weight's columns; a 1-D bias is whole); None when it is whole."""
    if cut.parallel is None or ndim == 0:
        return None
    if cut.parallel == "column":
        return 0
    return 1 if ndim >= 2 else None


def cut_dense(array: NDArray[Any], cut: Cut) -> NDArray[Any]:
    """The rank's part of a dense tensor (a view, or a new array when rows are padded)."""
    axis = _dense_axis(cut, array.ndim)
    if axis is None:
        return array
    if cut.pad_to > array.shape[axis]:
        pad = [(0, 0)] * array.ndim
        pad[axis] = (0, cut.pad_to - array.shape[axis])
        array = np.pad(array, pad)
    part = array.shape[axis] // cut.count
    index = [slice(None)] * array.ndim
    index[axis] = slice(cut.index * part, (cut.index + 1) * part)
    return array[tuple(index)]


def cut_layer(layer: LinearLayer, cut: Cut) -> LinearLayer:
    """The rank's shard of a quantised layer: what ``linear(prefix, tp_rank=cut.index,
    tp_size=cut.count, parallel=cut.parallel)`` gives for the whole layer [SET-7]."""
    if cut.parallel is None:
        return layer
    return shard(layer, tp_rank=cut.index, tp_size=cut.count, parallel=cut.parallel)


def layer_of(stored: Sequence[StoredTensor]) -> LinearLayer:
    """A layer from the entries that store it (``encode_linear``'s output)."""
    parts = {t.name.rpartition(".")[2]: t for t in stored}
    q, s = parts["qweight"], parts["scales"]
    bias = parts.get("bias")
    family = q.fields["layout"].split("_")[0]
    return LinearLayer(q.name.rpartition(".")[0], family, q.array, s.array,
                       parts["qzeros"].array, None if bias is None else bias.array,
                       q.fields["k"], q.fields["n"], q.fields["bits"], q.fields["group_size"],
                       s.fields["dtype"])  # fmt: skip


def stored_layer(layer: LinearLayer, bias_dtype: str | None) -> list[StoredTensor]:
    """The entries that store a layer (or a shard) as it is, with its own ``k`` and ``n``."""
    fields = dict(bits=layer.bits, group_size=layer.group_size, k=layer.k, n=layer.n)
    out = [
        StoredTensor(f"{layer.prefix}.qweight", layer.qweight,
                     dict(layout=f"{layer.layout}_QWEIGHT", **fields)),
        StoredTensor(f"{layer.prefix}.scales", layer.scales,
                     dict(dtype=layer.scale_dtype, layout=f"{layer.layout}_SCALES", **fields)),
        StoredTensor(f"{layer.prefix}.qzeros", layer.qzeros,
                     dict(layout=f"{layer.layout}_QZEROS", **fields)),
    ]  # fmt: skip
    if layer.bias is not None:
        out.append(StoredTensor(f"{layer.prefix}.bias", layer.bias, dict(dtype=bias_dtype)))
    return out


def split_stored(stored: list[StoredTensor], cuts: Sequence[Cut], *, layer: bool) -> list[
    list[StoredTensor]
]:  # fmt: skip
    """Each rank's entries of one step (a quantised layer, or one dense tensor)."""
    if layer:
        whole = layer_of(stored)
        bias = next((t for t in stored if t.name.endswith(".bias")), None)
        bias_dtype = None if bias is None else bias.fields.get("dtype")
        return [stored_layer(cut_layer(whole, cut), bias_dtype) for cut in cuts]
    (tensor,) = stored
    return [[StoredTensor(tensor.name, cut_dense(tensor.array, c), tensor.fields)] for c in cuts]


# ------------------------------------------------------------ joining a rank set (resharding)


def recorded_plan(description: Any) -> SplitPlan:
    """The plan a rank set's members record under ``tensor_parallel``
    (:meth:`SplitPlan.description`), to undo its cuts; ``TP_BAD_CONFIG`` if it is not one."""

    def bad(what: str, found: Any) -> FormatError:
        return _refuse("TP_BAD_CONFIG", f"the rank set's tensor_parallel record: {what}",
                       expected="what convert --tp records", found=str(found)[:80])  # fmt: skip

    if not isinstance(description, Mapping):
        raise bad("absent or not an object", description)
    tp_size, rules = description.get("tp_size"), description.get("rules")
    if not _count(tp_size):
        raise bad("tp_size", tp_size)
    if not isinstance(rules, list) or not all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r)
        and r[1] in KINDS for r in rules
    ):  # fmt: skip
        raise bad("rules", rules)
    if description.get("vocab_padding") != VOCAB_PADDING:
        raise bad(f"vocab_padding (this converter pads to {VOCAB_PADDING})",
                  description.get("vocab_padding"))  # fmt: skip
    heads = None
    if "num_attention_heads" in description:
        counts = [description.get(k) for k in
                  ("num_attention_heads", "num_key_value_heads", "head_dim")]  # fmt: skip
        if not all(_count(c) for c in counts):
            raise bad("head counts", counts)
        heads = Heads(*(int(c) for c in counts if _count(c)))
    family = description.get("rule_family")
    return SplitPlan(tp_size, [(p, k) for p, k in rules],
                     family=family if isinstance(family, str) else None, heads=heads)  # fmt: skip


class RankJoin:
    """The inverse of every cut a rank set was written with: each rank's parts joined into the
    whole tensor.  Exact for every kind: column and row parts are concatenated back in index
    order; replicated parts (a kind ``replicated``, key/value heads on several ranks [SET-12],
    a row-parallel layer's bias and group-less zero points and scales) must be the same bytes
    on every rank that holds them (``TP_BAD_SHARD`` otherwise); a vocabulary table's padding
    is cut off again, its rows being ``config.json``'s ``vocab_size``, as a model builds its
    embedding (refused, ``TP_BAD_CONFIG``, unless padding that many rows gives the stored
    count and every padding row is zero)."""

    def __init__(self, plan: SplitPlan, config: Mapping[str, Any] | None) -> None:
        self.plan = plan
        vocab = (config or {}).get("vocab_size")
        self._vocab: int | None = vocab if _count(vocab) else None

    def _out_features(self, module: str) -> int:
        kind, heads = self.plan.kind(module), self.plan.heads
        if kind in ("heads", "kv_heads") and heads is not None:
            return (heads.heads if kind == "heads" else heads.kv_heads) * heads.head_dim
        return 0

    def layer_cuts(self, prefix: str) -> list[Cut]:
        return self.plan.cuts(prefix, out_features=self._out_features(prefix), quantised=True)

    def whole_kn(self, prefix: str, k: int, n: int) -> tuple[int, int]:
        """The whole layer's ``k`` and ``n`` from one shard's."""
        cut = self.layer_cuts(prefix)[0]
        if cut.parallel == "row":
            return k * cut.count, n
        return k, n * cut.count

    def _dense_cuts(self, name: str, rows: int, *, layer: bool) -> list[Cut]:
        module = name.rpartition(".")[0]
        if layer:  # a layer's bias: the layer's cut
            return self.layer_cuts(module)
        kind = self.plan.kind(module)
        if kind != "vocab":
            return self.plan.cuts(module, out_features=self._out_features(module) or rows,
                                  quantised=False)  # fmt: skip
        padded, vocab = rows * self.plan.tp_size, self._vocab
        if vocab is None or -(-vocab // VOCAB_PADDING) * VOCAB_PADDING != padded:
            raise _refuse("TP_BAD_CONFIG", f"{name}: the vocabulary table's rows before padding "
                          f"cannot be told: config.json's vocab_size padded to a multiple of "
                          f"{VOCAB_PADDING} is not the {padded} rows stored",
                          expected=f"a vocab_size from {padded - VOCAB_PADDING + 1} to {padded}",
                          found=vocab)  # fmt: skip
        return self.plan.cuts(module, out_features=vocab, quantised=False)

    def whole_shape(self, name: str, shape: tuple[int, ...], *, layer: bool) -> tuple[int, ...]:
        """A dense tensor's whole shape from one rank's part."""
        cut = self._dense_cuts(name, shape[0] if shape else 0, layer=layer)[0]
        axis = _dense_axis(cut, len(shape))
        if axis is None:
            return shape
        whole = list(shape)
        whole[axis] = self._vocab if cut.pad_to and self._vocab else shape[axis] * cut.count
        return tuple(whole)

    def join_dense(self, name: str, parts: Sequence[NDArray[Any]], *, layer: bool) -> NDArray[Any]:
        """A dense tensor (or a layer's bias) from every rank's part."""
        shape = parts[0].shape
        cuts = self._dense_cuts(name, shape[0] if shape else 0, layer=layer)
        axis = _dense_axis(cuts[0], len(shape))
        rows = self._vocab if cuts[0].pad_to else None
        return uncut(name, parts, cuts, axis, rows=rows)

    def join_part(self, prefix: str, part: str, parts: Sequence[NDArray[Any]], *,
                  group_size: int) -> NDArray[Any]:  # fmt: skip
        """A quantised layer's unpacked part (codes ``[k, n]``, zero points or scales
        ``[G, n]``) from every rank's: column cuts join along n; row cuts along k, the zero
        points and scales of a layer without groups being whole on every rank."""
        cuts = self.layer_cuts(prefix)
        axis: int | None = 1
        if cuts[0].parallel == "row":
            axis = 0 if part == "qweight" or group_size != -1 else None
        return uncut(f"{prefix}.{part}", parts, cuts, axis)


def uncut(name: str, parts: Sequence[NDArray[Any]], cuts: Sequence[Cut], axis: int | None, *,
          rows: int | None = None) -> NDArray[Any]:  # fmt: skip
    """The inverse of cutting a tensor along ``axis`` (None: whole on every rank): rank ``r``
    holds ``parts[r]``, cut ``cuts[r]``.  Ranks holding the same index must agree byte for
    byte; ``rows`` (a vocabulary table) trims the zero rows of padding."""
    whole = axis is None or cuts[0].parallel is None
    distinct: dict[int, NDArray[Any]] = {}
    for rank, (array, cut) in enumerate(zip(parts, cuts, strict=True)):
        index = 0 if whole else cut.index
        first = distinct.setdefault(index, array)
        if first is not array and not _same_bytes(first, array):
            raise _refuse("TP_BAD_SHARD", f"{name}: rank {rank} holds another copy of a part "
                          "that its cut gives to several ranks", expected="the same bytes",
                          found="different bytes")  # fmt: skip
    if whole:
        return distinct[0]
    assert axis is not None
    joined = np.concatenate([distinct[i] for i in range(cuts[0].count)], axis=axis)
    if rows is not None and rows < joined.shape[axis]:
        where: list[slice] = [slice(None)] * joined.ndim
        where[axis] = slice(rows, None)
        if np.ascontiguousarray(joined[tuple(where)]).view(np.uint8).any():
            raise _refuse("TP_BAD_SHARD", f"{name}: rows after the vocabulary's {rows} are not "
                          "the zero rows of padding", expected="zero rows",
                          found="non-zero")  # fmt: skip
        where[axis] = slice(0, rows)
        joined = joined[tuple(where)]
    return joined


def _same_bytes(a: NDArray[Any], b: NDArray[Any]) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------------- choosing a plan


#: The deepest a rules file may nest: ``{"rules": [[pattern, kind], ...]}`` is 3.
_RULES_DEPTH = 3


def read_rules(path: Path) -> list[tuple[str, str]]:
    """User rules from a JSON file: ``[["pattern", "kind"], ...]`` (or ``{"rules": [...]}``);
    ``ValueError`` naming what is wrong; ``OSError`` for a file that is not a regular file (a
    FIFO is refused, not waited on) or cannot be read."""
    with open_regular(path) as f:
        raw = f.read(MAX_RULES_FILE + 1)
    if len(raw) > MAX_RULES_FILE:
        raise ValueError(f"{path}: longer than {MAX_RULES_FILE} bytes")
    depth = lexical_depth(raw)  # measured before parsing: json's recursion never overflows
    if depth > _RULES_DEPTH:
        raise ValueError(f"{path}: nested {depth} deep; a list of [pattern, kind] pairs is 2 "
                         "(or 3 under {\"rules\": ...})")  # fmt: skip
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON in UTF-8: {exc}") from exc
    items = document.get("rules") if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a list of [pattern, kind] pairs")
    rules = []
    for i, item in enumerate(items):
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(x, str) for x in item) or item[1] not in KINDS):  # fmt: skip
            raise ValueError(f"{path}: rule {i} is not [pattern, kind] with kind in {KINDS}")
        try:
            re.compile(item[0])
        except re.error as exc:
            raise ValueError(f"{path}: rule {i}: bad pattern {item[0]!r}: {exc}") from exc
        rules.append((item[0], item[1]))
    return rules


def plan_for(
    config: Mapping[str, Any], tp_size: int, *, user_rules: Sequence[tuple[str, str]] = ()
) -> SplitPlan:
    """The plan for a model: the user's rules first, then its family's table (first match
    wins).  An architecture without a table needs user rules (``TP_BAD_CONFIG``)."""
    architectures = config.get("architectures") or []
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    family = ARCHITECTURES.get(architecture) if isinstance(architecture, str) else None
    if family is None and not user_rules:
        raise _refuse("TP_BAD_CONFIG", f"no tensor-parallel rule table for architecture "
                      f"{architecture!r}; give the rules with --tp-rules",
                      expected=f"one of {sorted(ARCHITECTURES)}", found=architecture)  # fmt: skip
    table = FAMILIES[family] if family is not None else ()
    return SplitPlan(tp_size, [*user_rules, *table], family=family,
                     heads=Heads.from_config(config))  # fmt: skip
