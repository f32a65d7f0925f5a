"""TenSet-style data tools: record loaders, the shared dataset schema, pruning, splits and metrics.

This package never imports :mod:`tvm_transfer`; the TVM plug-ins build on it, not the reverse.
"""

from pathlib import Path

#: The small dataset measured on this project's machine with ``tenset-tools collect`` (how it was made:
#: ``data/README.md`` beside it).
SHIPPED_DATASET = Path(__file__).parent / "data" / "collected_cpu.parquet"
