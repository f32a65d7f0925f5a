"""The exact-match benchmark rebuilds a tuned run from a pack's corpus: the run it times the pack against
must be the run the pack was built from, record for record."""

from __future__ import annotations

import pytest

from benchmarks.transfer_exact import _rebuilt_run, _same_schedules, _tuned_runs
from tenset_tools.metaschedule import mean_run_seconds
from tvm_transfer.target import target_id
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.session import top_records
from tvm_transfer.tuning.workdir import open_database


def _best_seconds(work_dir, tasks) -> list[float]:
    database = open_database(work_dir)
    best = []
    for task in tasks:
        top = top_records(database, task.dispatched[0], 1)
        best.append(mean_run_seconds(top[0].run_secs) if top else float("nan"))
    return best


def test_a_run_rebuilt_from_the_corpus_holds_its_measured_records_and_best_schedules(
    pack, tuned_mlp, target, tmp_path
):
    source, _ = tuned_mlp
    tasks = extract_network_tasks("mlp", target)
    runs = _tuned_runs(pack, target_id(target))
    assert list(runs) == ["mlp"]
    rebuilt = _rebuilt_run(runs["mlp"], tasks, target, tmp_path / "rebuilt")

    measured = [r for r in open_database(source).get_all_tuning_records() if r.run_secs]
    assert len(open_database(rebuilt).get_all_tuning_records()) == len(measured) == len(runs["mlp"])
    assert _best_seconds(rebuilt, tasks) == pytest.approx(_best_seconds(source, tasks), rel=1e-12)
    assert _same_schedules(source, rebuilt, tasks) == len(tasks)
