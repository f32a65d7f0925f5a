"""Ansor (``tvm.auto_scheduler``) and TenSet measure records, read without TVM.

:mod:`.records` streams and parses log files, :mod:`.workload` recovers op kind, shapes and FLOPs from
workload keys, :mod:`.steps` encodes schedules as per-step rows, :mod:`.convert` writes the dataset schema.
"""

from .convert import convert_records, records_to_arrow, target_id_of, task_id_of
from .records import HARDWARE_PARAM_NAMES, AnsorRecord, LoadStats, iter_file, iter_records
from .steps import STEP_KINDS, STEP_WIDTH, encode_steps
from .workload import WorkloadInfo, parse_workload_key

__all__ = [
    "HARDWARE_PARAM_NAMES",
    "STEP_KINDS",
    "STEP_WIDTH",
    "AnsorRecord",
    "LoadStats",
    "WorkloadInfo",
    "convert_records",
    "encode_steps",
    "iter_file",
    "iter_records",
    "parse_workload_key",
    "records_to_arrow",
    "target_id_of",
    "task_id_of",
]
