import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from tenset_helpers import REPO, make_record

from tenset_tools.cli import main
from tenset_tools.schema import (
    add_normalised_throughput,
    read_dataset,
    records_to_table,
    table_to_frame,
    write_dataset,
)


def test_help_uses_tenset_flag_names(capsys):
    with pytest.raises(SystemExit) as info:
        main(["split", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "--split-scheme" in text and "--train-ratio" in text and "by_target" in text
    with pytest.raises(SystemExit):
        main(["prune", "--help"])
    assert "--min-sample-size" in capsys.readouterr().out


def test_convert_fixture_directory(ansor_dir, tmp_path, capsys):
    out = tmp_path / "fixtures.parquet"
    assert main(["convert", str(ansor_dir), "-o", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "| records | 29 |" in text and "| corrupt lines skipped | 0 |" in text
    assert len(read_dataset(out)) == 29


def test_convert_reports_corrupt_lines(ansor_dir, tmp_path, capsys):
    lines = (ansor_dir / "tenset-k80-sample.json").read_text().splitlines()
    broken = tmp_path / "k80.json"
    broken.write_text(lines[0] + "\n" + lines[0][:300] + "\n" + lines[0] + "\n")
    assert main(["convert", str(broken), "-o", str(tmp_path / "k80.parquet"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "| records | 2 |" in captured.out and "| corrupt lines skipped | 1 |" in captured.out
    assert f"{broken}:2" in captured.err


def _dataset(path, n_tasks=4, n=60):
    rng = np.random.default_rng(0)
    records = []
    for t in range(n_tasks):
        for target in ("a", "b"):
            for _ in range(n):
                knob = int(rng.integers(1, 64))
                seq = np.array([[knob, t, 0.0]], dtype=np.float32)
                latency = 1e-3 * (1 + abs(knob - 20) / 10)
                records.append(
                    make_record(f"t{t}", target, latency, sequence_features=seq, flops=1e6 * (t + 1))
                )
    table = records_to_table(records, ["cores", "vector_bytes"])
    write_dataset(add_normalised_throughput(table_to_frame(table)), path)


def test_split_writes_both_sides(tmp_path, capsys):
    data = tmp_path / "d.parquet"
    _dataset(data)
    assert main(["split", str(data), "--split-scheme", "by_target", "--test-targets", "b"]) == 0
    train, test = read_dataset(tmp_path / "d_train.parquet"), read_dataset(tmp_path / "d_test.parquet")
    assert set(train["target_id"]) == {"a"} and set(test["target_id"]) == {"b"}
    assert train.attrs["hw_feature_names"] == ["cores", "vector_bytes"]
    assert "| test records | 240 |" in capsys.readouterr().out


def test_prune_with_evaluation(tmp_path, capsys):
    data, out = tmp_path / "d.parquet", tmp_path / "p.parquet"
    _dataset(data)
    args = ["prune", str(data), "-o", str(out), "--flops-coverage", "0.6", "--min-sample-size", "10"]
    assert main([*args, "--evaluate", "--split-scheme", "by_task", "--train-ratio", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "| tasks_after | 2 |" in text and "pairwise_accuracy_pruned" in text
    assert set(read_dataset(out)["task_id"]) == {"t3", "t2"}
    assert pq.read_metadata(out).num_rows < 480


def test_errors_are_reported_without_a_traceback(tmp_path, capsys):
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello")
    assert main(["split", str(not_parquet)]) == 1
    assert "not a readable Parquet" in capsys.readouterr().err
    assert (
        main(["convert", str(tmp_path / "missing"), "-o", str(tmp_path / "o.parquet"), "--no-progress"]) == 1
    )


def test_module_entry_point(ansor_dir, tmp_path):
    out = tmp_path / "m.parquet"
    command = [
        sys.executable,
        "-m",
        "tenset_tools",
        "convert",
        str(ansor_dir / "matmul.json"),
        "-o",
        str(out),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "| records | 1 |" in done.stdout


def test_pruning_benchmark_quick_mode(tmp_path, monkeypatch, capsys):
    from benchmarks import common, tenset_prune

    monkeypatch.setattr(common, "RESULTS", tmp_path)  # keep the repository's results untouched
    data = tmp_path / "d.parquet"
    _dataset(data)
    assert tenset_prune.main([str(data), "--quick"]) == 0
    result = json.loads((tmp_path / "tenset" / "tenset_prune_quick.json").read_text())
    assert [r["flops_coverage"] for r in result["results"]] == [1.0, 0.9]
    assert result["results"][1]["size_reduction"] > result["results"][0]["size_reduction"]
    assert result["split"]["train_records"] + result["split"]["test_records"] == 480
    assert "| pruned / full |" in (tmp_path / "tenset" / "tenset_prune_quick.md").read_text()
    assert "| pruned / full |" in capsys.readouterr().out
