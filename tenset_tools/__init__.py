"""TenSet-style data tools: record loaders, the shared dataset schema, pruning, splits and metrics.

This package never imports :mod:`tvm_transfer`; the TVM plug-ins build on it, not the reverse.
"""
