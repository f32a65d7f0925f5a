"""``python -m tenset_tools``: the ``tenset-tools`` command line."""

from .cli import main

raise SystemExit(main())
