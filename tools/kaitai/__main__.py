"""``python -m tools.kaitai``: see :mod:`tools.kaitai.check`."""

from tools.kaitai.check import main

raise SystemExit(main())
