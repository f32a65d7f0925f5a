"""tvm-transfer: transfer-learning cost models and search policies for Apache TVM MetaSchedule.

Submodules are imported on demand: ``import tvm_transfer`` stays cheap so that MetaSchedule's builder
workers, which import it to unpickle :func:`tvm_transfer.builder.fast_build`, start quickly.
"""

__version__ = "0.1.0"
