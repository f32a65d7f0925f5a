"""SiblingBests on a real tuned database: a sibling's best programs replayed on another task's shape, the
task's own records and foreign workloads left out, and a copula search seeded by siblings."""

from __future__ import annotations

import math

import pytest
from ms_helpers import tiny_tune_tir, tune_context
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.search_strategy.copula import CopulaSearch, TraceCopulaSampler, load_sources
from tvm_transfer.search_strategy.replay import replay_trace
from tvm_transfer.search_strategy.siblings import SiblingBests
from tvm_transfer.workloads import make_workload

SIBLING = make_workload("matmul", (64, 128, 64))
TASK = make_workload("matmul", (96, 128, 48))  # the same design space, other extents (48 = 3 x 16)


@pytest.fixture(scope="module")
def sibling_dir(target, tmp_path_factory):
    """A work dir with 16 measured candidates of SIBLING."""
    work_dir = tmp_path_factory.mktemp("siblings")
    tiny_tune_tir(SIBLING, target, work_dir, "random", seed=0, num_threads=2)
    return work_dir


def _database(work_dir) -> ms.database.JSONDatabase:
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def _tiles(schedule) -> list[list[int]]:
    trace = schedule.trace
    return [
        [int(x) for x in trace.get_decision(inst)]
        for inst in trace.insts
        if inst.kind.name == "SamplePerfectTile"
    ]


def test_siblings_best_programs_replay_on_the_tasks_extents(target, sibling_dir):
    database = _database(sibling_dir)
    best = SiblingBests(tune_context(TASK, target), database, top_k=3).schedules()
    assert len(best) == 3
    extents = {96, 128, 48}
    for schedule in best:
        assert {math.prod(tile) for tile in _tiles(schedule)} <= extents
    # The fastest sibling record comes first, its tiles repaired to the task's extents.
    (record,) = database.get_top_k(database.commit_workload(SIBLING.ir_module()), 1)
    source = [inst for inst in record.trace.insts if inst.kind.name == "SamplePerfectTile"]
    assert len(source) == len(_tiles(best[0]))


def test_the_tasks_own_records_are_not_siblings(target, sibling_dir):
    assert SiblingBests(tune_context(SIBLING, target), _database(sibling_dir)).schedules() == []


def test_a_foreign_workload_is_tried_once(target, sibling_dir, monkeypatch):
    from tvm_transfer.search_strategy import siblings as module

    replays = []

    def counted(*args):
        replays.append(args)
        return replay_trace(*args)

    monkeypatch.setattr(module, "replay_trace", counted)
    conv = make_workload("conv2d", (1, 14, 14, 32, 32, 3, 1, 1))
    siblings = SiblingBests(tune_context(conv, target), _database(sibling_dir), top_k=3)
    assert siblings.schedules() == [] and len(replays) == 1
    assert siblings.schedules() == [] and len(replays) == 1


def test_bad_top_k_is_refused(target, sibling_dir):
    with pytest.raises(ValueError, match="top_k"):
        SiblingBests(tune_context(TASK, target), _database(sibling_dir), top_k=0)
    with pytest.raises(ValueError, match="siblings"):
        CopulaSearch(TraceCopulaSampler(), siblings=-1)


def test_a_search_seeded_by_siblings_evolves_and_measures(target, sibling_dir, tmp_path):
    """The task's tuning shares the sibling's database; every evolution's population holds the sibling's
    best, replayed, and the run measures its whole budget without a failed candidate."""
    work_dir = tmp_path / "run"
    work_dir.mkdir()
    for name in ("database_workload.json", "database_tuning_record.json"):
        (work_dir / name).write_bytes((sibling_dir / name).read_bytes())
    sampler = TraceCopulaSampler().fit(load_sources([sibling_dir]))
    search = CopulaSearch(sampler, siblings=1, population_size=32, init_min_unmeasured=8)
    database = tiny_tune_tir(
        TASK, target, work_dir, "random", trials=24, strategy=search, seed=0, num_threads=2
    )
    records = database.get_top_k(database.commit_workload(TASK.ir_module()), 100)
    assert len(records) == 24
    assert all(float(r.run_secs[0]) < 1e9 for r in records)
