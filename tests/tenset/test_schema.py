import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tenset_helpers import make_record

from tenset_tools import schema
from tenset_tools.schema import (
    COLUMNS,
    SCHEMA_VERSION,
    DatasetFormatError,
    SchemaVersionError,
    add_normalised_throughput,
    merge_datasets,
    read_dataset,
    records_to_table,
    write_dataset,
)


def test_columns_are_the_documented_order():
    assert COLUMNS[:5] == ("task_id", "workload_key", "op_kind", "flops", "target_id")
    assert COLUMNS[-3:] == ("source", "network", "weight")
    assert len(COLUMNS) == 20
    assert SCHEMA_VERSION == 2


def test_round_trip_keeps_values_and_metadata(tmp_path):
    seq = np.arange(6, dtype=np.float32).reshape(2, 3)
    records = [
        make_record("t1", "cpu", 2e-3, sequence_features=seq, network="resnet", weight=3.0),
        make_record("t1", "cpu", None),
        make_record("t2", "cpu", 1e-3, kernel_features=[0.5, 1.5], hidden_features=[7.0]),
    ]
    table = records_to_table(records, hw_feature_names=["cores", "vector_bytes"])
    path = tmp_path / "d.parquet"
    write_dataset(table, path)
    frame = read_dataset(path)
    assert frame.attrs == {"schema_version": 2, "hw_feature_names": ["cores", "vector_bytes"]}
    assert list(frame.columns) == list(COLUMNS)
    assert frame["latency"].iloc[0] == 2e-3
    assert math.isnan(frame["latency"].iloc[1])
    assert list(frame["latencies"].iloc[1]) == []
    assert frame["error_kind"].tolist() == [None, "run_timeout", None]
    assert np.stack(frame["sequence_features"].iloc[0]).tolist() == seq.tolist()
    assert frame["sequence_features"].iloc[1] is None
    assert frame["kernel_features"].iloc[2].tolist() == [0.5, 1.5]
    assert frame["weight"].tolist() == [3.0, 1.0, 1.0]
    assert frame["network"].tolist() == ["resnet", None, None]
    assert all(math.isnan(v) for v in frame["norm_throughput"])


def test_frame_round_trip_through_write_dataset(tmp_path):
    records = [make_record("t1", "cpu", 1e-3, sequence_features=[[1.0, 2.0], [3.0, 4.0]])]
    path = tmp_path / "a.parquet"
    write_dataset(records_to_table(records, ["cores", "vector_bytes"]), path)
    frame = add_normalised_throughput(read_dataset(path))
    write_dataset(frame, tmp_path / "b.parquet")
    again = read_dataset(tmp_path / "b.parquet")
    assert again.attrs["hw_feature_names"] == ["cores", "vector_bytes"]
    assert again["norm_throughput"].tolist() == [1.0]
    assert np.stack(again["sequence_features"].iloc[0]).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_records_are_validated():
    with pytest.raises(KeyError, match="latency"):
        records_to_table([{k: v for k, v in make_record("t", "c", 1.0).items() if k != "latency"}])
    with pytest.raises(ValueError, match="candidate_kind"):
        records_to_table([make_record("t", "c", 1.0, candidate_kind="knobs")])
    with pytest.raises(ValueError, match="latency NaN"):
        records_to_table([{**make_record("t", "c", None), "latency": 1.0}])
    with pytest.raises(ValueError, match="positive latency"):
        records_to_table([make_record("t", "c", float("nan"))])
    with pytest.raises(ValueError, match="hw_feature_names"):
        records_to_table([make_record("t", "c", 1.0)], hw_feature_names=["only_one"])


def test_other_version_is_refused_with_file_versions_and_remedy(tmp_path):
    table = records_to_table([make_record("t", "c", 1.0)])
    path = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata({b"tenset_tools.schema_version": b"0"}), path)
    with pytest.raises(SchemaVersionError) as info:
        read_dataset(path)
    message = str(info.value)
    assert str(path) in message and "version 0" in message and "expected 2" in message
    assert "tenset-tools convert" in message
    assert isinstance(info.value, ValueError)


def test_store_features_round_trip_as_blocks_and_through_a_frame(tmp_path):
    stores = np.arange(2 * 164, dtype=np.float32).reshape(2, 164)
    records = [make_record("t", "c", 1e-3, store_features=stores), make_record("t", "c", 2e-3)]
    path = tmp_path / "a.parquet"
    write_dataset(records_to_table(records), path)
    write_dataset(read_dataset(path), tmp_path / "b.parquet")
    frame = read_dataset(tmp_path / "b.parquet")
    assert np.array_equal(np.stack(frame["store_features"].iloc[0]), stores)
    assert frame["store_features"].iloc[1] is None


def test_version_1_files_read_with_empty_store_features(tmp_path):
    table = records_to_table([make_record("t", "c", 1.0, kernel_features=[1.0])], ["cores", "vector_bytes"])
    old = table.drop_columns(["store_features"])
    path = tmp_path / "v1.parquet"
    metadata = {**old.schema.metadata, b"tenset_tools.schema_version": b"1"}
    pq.write_table(old.replace_schema_metadata(metadata), path)
    assert schema.read_metadata(path)["schema_version"] == 1
    frame = read_dataset(path)
    assert list(frame.columns) == list(COLUMNS) and frame["store_features"].isna().all()
    assert frame.attrs == {"schema_version": 2, "hw_feature_names": ["cores", "vector_bytes"]}
    assert frame["kernel_features"].iloc[0].tolist() == [1.0]
    subset = read_dataset(path, columns=["latency", "store_features"])
    assert list(subset.columns) == ["latency", "store_features"] and subset["store_features"].isna().all()


def test_missing_version_is_refused(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    with pytest.raises(SchemaVersionError, match="version none"):
        read_dataset(path)


def test_non_parquet_and_truncated_files_give_a_clear_error(tmp_path):
    text = tmp_path / "records.json"
    text.write_text('{"i": []}\n')
    with pytest.raises(DatasetFormatError, match="not a readable Parquet"):
        read_dataset(text)
    good = tmp_path / "good.parquet"
    write_dataset(records_to_table([make_record("t", "c", 1.0)]), good)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(DatasetFormatError, match=r"truncated\.parquet"):
        read_dataset(truncated)


def test_normalised_throughput_per_task_and_target():
    frame = pd.DataFrame(
        {
            "task_id": ["a", "a", "a", "a", "b"],
            "target_id": ["x", "x", "x", "y", "x"],
            "valid": [True, True, False, True, True],
            "latency": [2.0, 4.0, math.nan, 8.0, 3.0],
        }
    )
    result = add_normalised_throughput(frame)
    assert result["norm_throughput"].tolist() == [1.0, 0.5, 0.0, 1.0, 1.0]
    assert "norm_throughput" not in frame.columns


def test_streaming_writer_buffers_row_groups(tmp_path):
    path = tmp_path / "stream.parquet"
    with schema.DatasetWriter(path, ["cores", "vector_bytes"], row_group_rows=2) as writer:
        writer.write(records_to_table([make_record("t", "c", 1.0)]))
        writer.write(records_to_table([make_record("t", "c", 2.0), make_record("t", "c", None)]))
        writer.write(records_to_table([make_record("t", "c", 4.0)]))
    assert writer.rows == 4
    metadata = pq.ParquetFile(path).metadata
    # The 3 buffered rows are flushed as groups of at most 2, the last row on close.
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [2, 1, 1]
    assert read_dataset(path)["latency"].iloc[[0, 1, 3]].tolist() == [1.0, 2.0, 4.0]


def test_frames_with_nan_latencies_and_flops_round_trip(tmp_path):
    # Table.from_pandas reads NaN as null: the non-nullable float columns must keep NaN as a value.
    records = [make_record("t", "c", 1e-3), make_record("t", "c", None, flops=math.nan)]
    frame = add_normalised_throughput(schema.table_to_frame(records_to_table(records)))
    path = tmp_path / "nan.parquet"
    write_dataset(frame, path)
    back = read_dataset(path)
    assert back["latency"].iloc[0] == 1e-3 and math.isnan(back["latency"].iloc[1])
    assert math.isnan(back["flops"].iloc[1]) and back["norm_throughput"].tolist() == [1.0, 0.0]


def test_merged_datasets_keep_each_measured_candidate_once(tmp_path):
    names = ["cores", "vector_bytes"]
    first = [make_record("t1", "cpu", 1e-3, candidate='{"tile": 4}'), make_record("t1", "cpu", 2e-3)]
    # The second file repeats one candidate (measured again, slower), and adds one on another target.
    second = [make_record("t1", "cpu", 5e-3, candidate='{"tile": 4}'), make_record("t1", "gpu", 3e-3)]
    write_dataset(records_to_table(first, names), tmp_path / "a.parquet")
    write_dataset(records_to_table(second, names), tmp_path / "b.parquet")
    rows = merge_datasets([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "m.parquet")
    merged = read_dataset(tmp_path / "m.parquet")
    assert rows == 3 and merged.attrs["hw_feature_names"] == names
    assert merged["latency"].tolist() == [1e-3, 2e-3, 3e-3]  # the first measurement of a candidate wins
    write_dataset(records_to_table(second, ["cores", "l2_bytes"]), tmp_path / "c.parquet")
    with pytest.raises(DatasetFormatError, match="other hardware feature names"):
        merge_datasets([tmp_path / "a.parquet", tmp_path / "c.parquet"], tmp_path / "n.parquet")
    assert not (tmp_path / "n.parquet").exists()
