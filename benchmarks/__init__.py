"""Benchmarks of tvm_transfer, tenset_tools and vta_ext; run each from the repository root as
``python -m benchmarks.<name> [--quick]``. Results: ``benchmarks/results/`` (see its ``INDEX.md``);
inputs: ``benchmarks/data/``."""
