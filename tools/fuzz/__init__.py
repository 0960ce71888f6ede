"""Fuzz the reference reader with mutated conformance vectors: ``python -m tools.fuzz``.

Usage::

    python -m tools.fuzz [--inputs N] [--seconds S] [--seed K] [--save-crashes DIR]
                         [--workers W] [--timeout T] [--trace-every N] [--only v1|v2]
                         [--replay N [--out PATH]]

Every vector in ``conformance/manifest.json`` is a seed, and so are two AWQ v1 checkpoints
and three that the real quantisers wrote (``tests/fixtures/real/``: two compressed-tensors
``pack-quantized``, one AutoAWQ GEMM), all under ``v1`` (``--only`` keeps one kind; input
N then differs, so ``--replay`` needs the same ``--only``).
Each input is one seed with one to four mutations applied, chosen by a ``random.Random``
seeded with ``"{seed}/{input number}"``, so any input can be rebuilt from its number alone
(``--replay N`` writes it out: an AWQ-v2 file, or an AWQ v1 checkpoint folder):

* bit flips, byte overwrites (random and "interesting" 1/2/4/8-byte values), truncations,
  extensions, insertions and deletions, and splices of two seed files;
* structure-aware edits of every header, trailer, index-entry and bucket-table field, of the
  dims, the names and the metadata, with boundary values (0, 1, max, max + 1, the top bit set,
  small negatives stored as unsigned, each limit and limit + 1, the other entries' values), and
  composite edits that keep related fields consistent (a dimension and the length, dtype and
  length, layout and quantisation fields, a name and its hash, a resized metadata document and
  the index length, a 64 KiB block inserted before the index);
* after most structure-aware edits the checksums are recomputed (``tools.vectors.surgery``'s
  ``FileEditor.refresh``, sometimes partially) so the input gets past the CRCs into the deep
  checks;
* an AWQ v1 input is a checkpoint folder: one ``model.safetensors`` or 2-3 shards with
  ``model.safetensors.index.json``, and ``config.json``, the legacy ``quant_config.json``,
  both or neither; besides edits of the shards, structure-aware edits of every JSON file
  (:mod:`tools.fuzz.jsontext`: wrong types, nesting up to 100,000 levels, members over
  16 MiB, NaN and other numbers JSON forbids, lone surrogates, control characters, invalid
  UTF-8, a BOM, duplicate keys, ``weight_map`` names that leave the folder or are not plain
  names) and byte-level edits of their text.

Each input runs in a long-lived worker process (one per CPU, restarted after a timeout or a
crash) over the whole reader path: ``reference.open``, ``validate()``, ``entry()``, ``tensor()``
and ``in`` for every name (plus absent names), ``linear()`` and ``dequantize()`` of every layer,
``metadata``, ``entries()``, ``tensors()``, ``read_into()``, ``verify()``; for an AWQ v1 input
over the folder (and the single file, when it is one), then the converter's planning path
(``reference.convert.make_plan(src, hash_sources=False)`` and ``plan.sizes()``), and for 2% of
them ``reference.convert.main([src, dst, "--quiet"])``, which must return one of its documented
statuses (0-3).  An input passes when it is accepted or only ``reference.FormatError`` (or
``KeyError`` for a name that is not there) escapes.  Anything else is an unexpected
exception; a worker that dies (a signal), an input over the time limit, and an input whose
peak memory (tracemalloc peak, or growth of the worker's ``ru_maxrss``) exceeds its size (all
its files) + 64 MiB are reported too, and make the exit status 1.

Also reported, for information: files that ``validate()`` accepted but a later lookup or layer
call rejected with a ``FormatError`` (checks the lazy path makes and full validation does not).

The modules, one job each:

``view``
    a possibly damaged AWQ-v2 file as its header describes it (:mod:`spec.geometry`);
``mutant``
    one input under construction, and the byte-level mutators that fit any file;
``awq2``
    the structure-aware mutators of AWQ-v2 files and the checksum refresh;
``v1``
    the AWQ v1 seeds, their checkpoint-folder layouts and their mutators;
``jsontext``
    the mutators of the JSON files of an AWQ v1 checkpoint (text-level, structure-aware);
``inputs``
    the seeds, and input ``number`` of ``--seed K``;
``target``
    the reader path over one input, and its result;
``harness``
    worker processes, time and memory limits, the tally;
``report``
    the summary printed at the end;
``__main__``
    the command line.

Beside it, coverage-guided fuzzing, seeded with the same vectors: ``libfuzzer`` builds and
runs the C loader's libFuzzer target (``conformance/adapters/c/fuzz/``), ``atheris_reader``
runs the reader path of ``target`` under atheris.
"""
