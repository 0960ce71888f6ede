"""AWQ-v2 conformance suite: the committed vectors and their manifest (``generate``), the
runner that checks any loader against them (``python -m conformance.run``), the loader
adapters (``adapters/``), and the malformed-file catalogue (``mutations``, ``surgery``).

What a loader adapter must do is on the site's conformance page (``docs/conformance/index.md``).
"""
