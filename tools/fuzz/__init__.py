"""Fuzz the reference reader with mutated conformance vectors: ``python -m tools.fuzz``.

Usage::

    python -m tools.fuzz [--inputs N] [--seconds S] [--seed K] [--save-crashes DIR]
                         [--workers W] [--timeout T] [--trace-every N] [--replay N]

Every vector in ``conformance/manifest.json`` is a seed, and so are two AWQ v1 checkpoints.
Each input is one seed with one to four mutations applied, chosen by a ``random.Random``
seeded with ``"{seed}/{input number}"``, so any input can be rebuilt from its number alone
(``--replay N`` writes it out):

* bit flips, byte overwrites (random and "interesting" 1/2/4/8-byte values), truncations,
  extensions, insertions and deletions, and splices of two seed files;
* structure-aware edits of every header, trailer, index-entry and bucket-table field, of the
  dims, the names and the metadata, with boundary values (0, 1, max, max + 1, the top bit set,
  small negatives stored as unsigned, each limit and limit + 1, the other entries' values), and
  composite edits that keep related fields consistent (a dimension and the length, dtype and
  length, layout and quantisation fields, a name and its hash, a resized metadata document and
  the index length, a 64 KiB block inserted before the index);
* after most structure-aware edits the checksums are recomputed (``conformance.surgery``'s
  ``FileEditor.refresh``, sometimes partially) so the input gets past the CRCs into the deep
  checks.

Each input runs in a long-lived worker process (one per CPU, restarted after a timeout or a
crash) over the whole reader path: ``reference.open``, ``validate()``, ``entry()``, ``tensor()``
and ``in`` for every name (plus absent names), ``linear()`` and ``dequantize()`` of every layer,
``metadata``, ``entries()``, ``tensors()``, ``read_into()``, ``verify()``.  An input passes when
it is accepted or only ``reference.FormatError`` (or ``KeyError`` for a name that is not there)
escapes.  Anything else is an unexpected exception; a worker that dies (a signal), an input over
the time limit, and an input whose peak memory (tracemalloc peak, or growth of the worker's
``ru_maxrss``) exceeds its file size + 64 MiB are reported too, and make the exit status 1.

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
    the AWQ v1 (safetensors + config.json) seeds and mutators;
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
"""
