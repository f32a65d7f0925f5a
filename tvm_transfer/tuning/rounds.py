"""The per-round record of a network's tuning: after every measured batch, the best latency of every task
and the estimated network latency, appended to ``tuning_rounds.jsonl`` in the work dir.

It is what a curve of network latency versus trials is drawn from without re-running, and it survives
interruptions: a resumed run appends to the same file, counting the trials already in the database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.runner import batch_seconds

__all__ = ["ROUNDS_FILE", "RoundLog", "read_rounds"]

ROUNDS_FILE = "tuning_rounds.jsonl"


class RoundLog:
    """Best latency per task (seconds), updated per measured batch and appended to ``path``.

    ``names``, ``weights`` (calls per inference) and ``bests`` (best seconds from records already measured,
    ``inf`` for none) describe every task of the network; ``trials`` counts the records already measured.
    """

    def __init__(
        self,
        path: Path,
        names: Sequence[str],
        weights: Sequence[float],
        bests: Sequence[float],
        trials: int,
        bar: tqdm | None = None,
    ) -> None:
        self.path = Path(path)
        self.names = list(names)
        self.weights = [float(w) for w in weights]
        self.bests = [float(b) for b in bests]
        self.trials = trials
        self.bar = bar

    @property
    def estimated_seconds(self) -> float:
        """Sum over tasks of weight x best latency, in seconds; ``inf`` while a task has no valid record."""
        return sum(w * b for w, b in zip(self.weights, self.bests, strict=True))

    def record(self, task: int, latencies: Sequence[float]) -> None:
        """Take one measured batch of task index ``task`` (latencies in seconds, ``inf`` for failures)."""
        self.trials += len(latencies)
        self.bests[task] = min([self.bests[task], *latencies])
        row = {
            "trials": self.trials,
            "task": task,
            "batch": len(latencies),
            "best_ms": [_ms(b) for b in self.bests],
            "estimated_ms": _ms(self.estimated_seconds),
            "tasks_with_record": sum(math.isfinite(b) for b in self.bests),
        }
        with self.path.open("a") as file:  # one line per batch: an interruption loses at most that line
            file.write(json.dumps(row) + "\n")
        if self.bar is not None:
            network = f"{row['estimated_ms']:.4g} ms" if row["estimated_ms"] is not None else "-"
            self.bar.set_postfix_str(
                f"task {task + 1}/{len(self.names)} {_short(self.names[task])} "
                f"best {_ms(self.bests[task]) or float('nan'):.4g} ms, network {network}"
            )

    def callback(self, task_indices: Sequence[int]) -> ms.measure_callback.PyMeasureCallback:
        """A MetaSchedule measure callback feeding this log; ``task_indices[i]`` is the network index of the
        tuning run's task ``i``."""
        return _RoundCallback(self, list(task_indices))


def read_rounds(work_dir: str | Path) -> list[dict]:
    """The rows of ``work_dir``'s round log, oldest first (a line cut by an interruption is skipped)."""
    path = Path(work_dir) / ROUNDS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


@derived_object
class _RoundCallback(ms.measure_callback.PyMeasureCallback):
    def __init__(self, log: RoundLog, task_indices: list[int]) -> None:
        super().__init__()
        self.log = log
        self.task_indices = task_indices

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.log.record(self.task_indices[task_id], batch_seconds(builder_results, runner_results))


def _ms(seconds: float) -> float | None:
    return round(seconds * 1e3, 6) if math.isfinite(seconds) else None


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
