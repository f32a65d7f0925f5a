"""The MetaSchedule database loader, on a real database tuned in the test (tvm_transfer is used here, in the
test only, to tune; tenset_tools never imports it)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from ms_helpers import tiny_tune_tir
from tvm.s_tir import meta_schedule as ms

from tenset_tools.cli import main
from tenset_tools.features import (
    PER_STORE_WIDTH,
    POOLED_WIDTH,
    TRACE_ROW_WIDTH,
    hardware_features,
    pool_per_store,
    target_id,
)
from tenset_tools.metaschedule import (
    RECORD_FILE,
    WORKLOAD_FILE,
    Sidecar,
    convert_databases,
    find_databases,
    op_kind_of,
    task_id_of_mod,
    write_sidecar,
)
from tenset_tools.schema import read_dataset
from tvm_transfer.workloads import make_workload

TRIALS = 8


@pytest.fixture(scope="module")
def database(tmp_path_factory, target):
    """A JSONDatabase of an 8-trial tune of a 64x64x64 dense layer (~15 s on 2 cores)."""
    work_dir = tmp_path_factory.mktemp("ms") / "dense"
    evolution = ms.search_strategy.EvolutionarySearch(population_size=16, init_min_unmeasured=8)
    dense = make_workload("dense", (64, 64, 64))
    tiny_tune_tir(
        dense, target, work_dir, "xgb", trials=TRIALS, strategy=evolution, seed=None, trials_per_iter=TRIALS
    )
    return work_dir


def _copy(database, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(database, copy)
    return copy


def test_every_record_converts_with_features_flops_and_target(database, target, tmp_path):
    stats = convert_databases(database, tmp_path / "d.parquet")
    frame = read_dataset(tmp_path / "d.parquet")
    records = list(ms.database.JSONDatabase(work_dir=str(database)).get_all_tuning_records())
    assert stats.records == len(frame) == len(records) == TRIALS and stats.corrupt == 0
    workload_mod = records[0].workload.mod
    assert set(frame["task_id"]) == {task_id_of_mod(workload_mod)}
    assert set(frame["op_kind"]) == {"reduce"}  # its one block is named "Y": no name rule, a reduction
    assert set(frame["flops"]) == {2 * 64**3}
    assert set(frame["target_id"]) == {target_id(target)}
    assert np.array_equal(frame["hw_features"].iloc[0], hardware_features(target))
    assert set(frame["candidate_kind"]) == {"ms_trace"}
    assert all(len(k) == POOLED_WIDTH and np.abs(k).sum() > 0 for k in frame["kernel_features"])
    # The per-store rows are what the pooled vector summarises: one row per store, pooled back (up to the
    # float32 rounding of the stored rows).
    stores = [np.stack(list(m)) for m in frame["store_features"]]
    assert all(m.shape[0] >= 1 and m.shape[1] == PER_STORE_WIDTH for m in stores)
    pooled = np.stack(frame["kernel_features"].to_numpy())
    np.testing.assert_allclose(pool_per_store(stores), pooled, rtol=1e-6, atol=1e-5)
    first = frame.iloc[0]
    trace = json.loads(first["candidate"])
    assert len(first["sequence_features"]) == len(trace[0])
    assert len(first["sequence_features"][0]) == TRACE_ROW_WIDTH
    measured = np.array([float(np.mean([float(s) for s in r.run_secs])) for r in records])
    # A candidate that failed to build or run is stored by MetaSchedule with 1e10 s: it must come out
    # invalid, and every other one valid with its measured latency.
    failed = measured >= 1e9
    assert int((~frame["valid"]).sum()) == int(failed.sum()) < TRIALS
    assert np.allclose(sorted(frame.loc[frame["valid"], "latency"]), sorted(measured[~failed]))
    assert frame["network"].isna().all() and (frame["weight"] == 1.0).all()
    assert json.loads(first["workload_key"])[1:] == [["float32", [64, 64]]] * 3


def test_corrupt_lines_are_reported_with_file_and_line_and_skipped(database, tmp_path, capsys):
    copy = _copy(database, tmp_path)
    path = copy / RECORD_FILE
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 2] + "\n"  # an interrupted write
    lines.append('[7, ["not a trace"]]\n')  # an unknown workload index
    path.write_text("".join(lines))
    stats = convert_databases(copy, tmp_path / "d.parquet")
    assert stats.records == TRIALS - 1 and stats.corrupt == 2
    assert [(c.path, c.line_no) for c in stats.corrupt_lines] == [(str(path), 2), (str(path), TRIALS + 1)]
    assert len(read_dataset(tmp_path / "d.parquet")) == TRIALS - 1
    out = tmp_path / "cli.parquet"
    assert main(["convert", str(copy), "-o", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"| records | {TRIALS - 1} |" in captured.out and "| corrupt lines skipped | 2 |" in captured.out
    assert f"{path}:2" in captured.err


def test_failed_measurements_are_invalid(database, tmp_path):
    copy = _copy(database, tmp_path)
    path = copy / RECORD_FILE
    convert_databases(copy, tmp_path / "before.parquet")
    # The real tune may itself have failed a candidate (a CI run had one; its cause was not kept).
    failed_in_tune = len(read_dataset(tmp_path / "before.parquet").query("not valid"))
    index, entry = json.loads(path.read_text().splitlines()[0])
    entry[1] = [1e10]  # how MetaSchedule stores a failed build or run
    with open(path, "a") as records:
        records.write(json.dumps([index, entry]) + "\n")
    convert_databases(copy, tmp_path / "d.parquet")
    frame = read_dataset(tmp_path / "d.parquet")
    failed = frame.query("not valid")
    appended = frame.iloc[-1]
    assert len(failed) == failed_in_tune + 1 and set(failed["error_kind"]) == {"measure_error"}
    assert not appended["valid"] and math.isnan(appended["latency"]) and len(appended["latencies"]) == 0


def test_sidecar_gives_network_and_task_weights(database, tmp_path):
    copy = _copy(database, tmp_path)
    mod = ms.database.JSONDatabase(work_dir=str(copy)).get_all_tuning_records()[0].workload.mod
    write_sidecar(copy, Sidecar("tiny_net", {task_id_of_mod(mod): ("dense", 3.0)}))
    convert_databases(copy, tmp_path / "d.parquet")
    frame = read_dataset(tmp_path / "d.parquet")
    assert set(frame["network"]) == {"tiny_net"} and set(frame["weight"]) == {3.0}


def test_find_databases_accepts_dirs_files_and_trees(database, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(database, tree / "a")
    shutil.copytree(database, tree / "b" / "c")
    assert find_databases(database) == [database]
    assert find_databases(database / WORKLOAD_FILE) == [database]
    assert find_databases(tree) == [tree / "a", tree / "b" / "c"]
    assert find_databases(tmp_path / "missing") == []
    with pytest.raises(FileNotFoundError, match="no MetaSchedule database"):
        convert_databases(tmp_path / "missing", tmp_path / "d.parquet")


def test_op_kinds_of_real_network_tasks(target):
    from tvm_transfer.tuning.run import extract_network_tasks

    kinds = {}
    for network in ("mobilenet_v2_block", "bert_tiny_layer"):
        for task in extract_network_tasks(network, target):
            kinds.setdefault(op_kind_of(task.dispatched[0]), set()).add(task.task_name)
    assert {"conv2d", "depthwise_conv2d", "matmul", "batch_matmul", "softmax", "layer_norm"} <= set(kinds)
    assert len(kinds["batch_matmul"]) == 1  # attention scores: (1, 2, 64, 64) per head
    assert {name for name in kinds["elementwise"] if "transpose" in name}  # the heads' layout change
    assert len(kinds["depthwise_conv2d"]) == 1
