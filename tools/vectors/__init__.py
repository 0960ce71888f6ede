"""The makers of the conformance vectors: ``python -m tools.vectors.generate`` writes every
vector and ``conformance/manifest.json`` from the catalogues here (``mutations``: one rule broken
per must-reject vector; ``fuzz_findings``: inputs the fuzzer found; ``surgery``: the byte editor
both use).  Not installed: the suite a user installs holds the vectors, not their makers."""
