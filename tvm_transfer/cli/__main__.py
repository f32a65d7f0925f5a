"""``python -m tvm_transfer.cli``: the ``tvm-transfer`` command line."""

from . import main

raise SystemExit(main())
