"""``python -m fedkd.tools.bench``: the same as ``fedkd bench``."""

from fedkd.tools.bench.command import main

raise SystemExit(main())
