"""The Kaitai Struct description of the container, ``spec/awq2.ksy``, and its check.

``spec/awq2.ksy`` is generated from :mod:`spec` (the construct structures of
:mod:`spec.schema`, the constants, the dtype and layout registries) by :mod:`tools.kaitai.ksy`,
written by ``python -m tools.regen`` with every other generated file (and copied to
``docs/assets/awq2.ksy`` for the site); ``--check`` fails when either is stale.

``python -m tools.kaitai`` (:mod:`tools.kaitai.check`) compiles the committed ``.ksy`` with
the real compiler (the npm package ``kaitai-struct-compiler`` pinned in
``tools/kaitai/package.json``, run by node), parses every must-accept vector with the
generated Python parser and the ``kaitaistruct`` runtime, and compares every field with the
reference reader.  Install its node side with ``npm ci --prefix tools/kaitai``.
"""
