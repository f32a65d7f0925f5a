import json
import math
import shutil

import numpy as np
import pytest
from log_helpers import warnings_of

from tenset_tools.ansor import (
    HARDWARE_PARAM_NAMES,
    STEP_KINDS,
    STEP_WIDTH,
    LoadStats,
    convert_records,
    encode_steps,
    iter_file,
    iter_records,
    parse_workload_key,
    records_to_arrow,
    target_id_of,
)
from tenset_tools.schema import add_normalised_throughput, read_dataset

RESNET_TARGET = "llvm -keys=cpu -mcpu=core-avx2"
K80_HW = (-1, 16, 64, 49152, 2147483647, 1024, 8, 32)


def test_resnet50_v05_file_loads_every_record(ansor_dir):
    stats = LoadStats()
    records = list(iter_file(ansor_dir / "resnet-50-NHWC-B1-llvm.json", stats))
    assert (stats.records, stats.corrupt, stats.skipped_lines, stats.lines) == (26, 0, 2, 28)
    assert {r.version for r in records} == {"v0.5"}
    assert {r.target for r in records} == {RESNET_TARGET}
    assert {r.hardware_params for r in records} == {(8, 64, 64, 0, 0, 0, 0, 0)}
    assert {(r.target_host, r.layout_rewrite_option, r.task_input_names) for r in records} == {("", 2, None)}
    first, last = records[0], records[-1]
    assert json.loads(first.workload_key) == ["d7b65649a4dd54becea0a52aabbc5af5", 1, 1000, 1, 1000]
    assert len(first.costs) == 10 and first.costs[:2] == [8.75e-06, 1.0781e-05]
    assert (first.error_no, first.all_cost, first.timestamp) == (0, 0.17921, 1606960872)
    assert first.steps[0] == ["SP", 3, 1, 1000, [50], 1]
    assert last.line_no == 28 and last.costs[0] == 0.000150378
    assert all(r.error_no == 0 and len(r.costs) == 10 for r in records)


def test_v03_matmul_record(ansor_dir):
    (record,) = iter_file(ansor_dir / "matmul.json")
    assert record.version == "v0.3" and record.line_no == 2
    assert record.workload_key == '["matmul_add", 1024, 1024, 1024, "float32"]'
    assert record.target == "llvm -keys=cpu"
    assert record.hardware_params == (18, 64, 64, 0, 0, 0, 0, 0)
    assert (record.target_host, record.layout_rewrite_option, record.task_input_names) == (None, None, None)
    assert record.costs == [0.0044742]
    assert (record.error_no, record.all_cost, record.timestamp) == (0, 0.335558, 1607112214)
    assert len(record.steps) == 13


def test_v02_cuda_record_without_hardware_params(ansor_dir):
    (record,) = iter_file(ansor_dir / "conv2d.json")
    assert record.version == "v0.2" and record.hardware_params is None
    assert record.target == "cuda -keys=cuda,gpu -max_num_threads=1024 -thread_warp_size=32"
    assert record.costs == [0.000429498] and record.all_cost == 1.59126
    assert target_id_of(record.target) == "cuda"


def test_v06_tenset_k80_record(ansor_dir):
    (record,) = iter_file(ansor_dir / "tenset-k80-sample.json")
    assert record.version == "v0.6"
    assert record.hardware_params == K80_HW
    assert (record.target_host, record.layout_rewrite_option, record.task_input_names) == ("", 0, ())
    assert record.costs == [0.176353, 0.176359]
    assert (record.error_no, record.all_cost, record.timestamp) == (0, 3.90316, 1626295478)
    assert target_id_of(record.target) == "cuda-sm_37"
    assert target_id_of(record.target, "k80") == "k80"
    assert target_id_of("llvm -mcpu=skylake-avx512 -model=platinum-8272", "x") == "platinum-8272"


def test_truncated_line_is_reported_with_its_line_number_and_skipped(ansor_dir, tmp_path):
    lines = (ansor_dir / "resnet-50-NHWC-B1-llvm.json").read_text().splitlines()[2:6]
    lines[1] = lines[1][: len(lines[1]) // 2]
    path = tmp_path / "broken.json"
    path.write_text("# comment\n" + "\n".join(lines) + "\n\n\n")
    stats = LoadStats()
    with warnings_of("tenset_tools.ansor.records") as messages:
        records = list(iter_file(path, stats))
    assert [r.line_no for r in records] == [2, 4, 5]
    assert (stats.records, stats.corrupt, stats.skipped_lines) == (3, 1, 3)
    (bad,) = stats.corrupt_lines
    assert (bad.path, bad.line_no) == (str(path), 3)
    assert len(messages) == 1 and messages[0].startswith(f"{path}:3: skipped corrupt record")
    assert f"{path}:3" in stats.summary()


def test_structurally_wrong_lines_are_corrupt_not_fatal(tmp_path):
    good = (
        '{"i": [["[\\"k\\"]", "llvm", [1,2,3,4,5,6,7,8]], [[], [["CI", 1]]]], '
        '"r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}'
    )
    bad_lines = [
        '{"i": [["[\\"k\\"]", "llvm", [1,2,3]], [[], []]], "r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}',
        '{"i": [["[\\"k\\"]", "llvm", [1,2,3,4,5,6,7,"x"]], [[], []]], "r": [[1e-3], 0, 1, 5], "v": ""}',
        '{"i": [["[\\"k\\"]", "llvm"], [[], [[["CI"], 1]]]], "r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}',
        '{"i": [["[\\"k\\"]", "llvm"], [[], [["XX", 1]]]], "r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}',
        '{"i": [["[\\"k\\"]", "llvm"], [[], [[]]]], "r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}',
        '{"i": [["[\\"k\\"]", "llvm"], [[], []]], "r": [["slow"], 0, 1.0, 5], "v": "v0.3"}',
        '{"r": [[1e-3], 0, 1.0, 5]}',
        "[1, 2]",
        '{"i": [["[\\"k\\"]", "llvm"], [[], []]], "r": [[1e-3], 0, 1.0, 5], "v": "v0.3"}\x00garbage',
    ]
    path = tmp_path / "mixed.json"
    path.write_text("\n".join([good, *bad_lines, good]) + "\n")
    stats = LoadStats()
    assert [r.line_no for r in iter_file(path, stats)] == [1, len(bad_lines) + 2]
    assert stats.corrupt == len(bad_lines)
    assert [c.line_no for c in stats.corrupt_lines] == list(range(2, len(bad_lines) + 2))


def test_tree_walk_uses_hardware_folders(ansor_dir, tmp_path):
    tree = tmp_path / "measure_records"
    (tree / "k80").mkdir(parents=True)
    (tree / "core-avx2").mkdir()
    shutil.copy(ansor_dir / "tenset-k80-sample.json", tree / "k80" / "task.json")
    shutil.copy(ansor_dir / "resnet-50-NHWC-B1-llvm.json", tree / "core-avx2" / "resnet.json")
    stats = LoadStats()
    folders = [r.folder for r in iter_records(tree, stats)]
    assert folders == ["core-avx2"] * 26 + ["k80"]
    assert stats.files == 2


def test_step_encoding_rows():
    steps = [
        ["SP", 2, 0, 1024, [2, 1, 4], 1],
        ["PR", 2, 0, "auto_unroll_max_step$8"],
        ["CHR", 2, "shared", [3]],
        ["SP", 3, 0, 48, [None], 1],
        ["RE", 3, list(range(29))],
    ]
    rows = encode_steps(steps)
    assert rows.shape == (5, STEP_WIDTH) and rows.dtype == np.float32
    kinds = len(STEP_KINDS)
    assert rows[:, :kinds].argmax(axis=1).tolist() == [STEP_KINDS.index(s[0]) for s in steps]
    assert rows[:, :kinds].sum(axis=1).tolist() == [1.0] * 5
    assert rows[0, kinds : kinds + 8].tolist() == [2, 0, 1024, 2, 1, 4, 1, 0]
    assert rows[1, kinds : kinds + 5].tolist() == [2, 0, 1, 8, 0]
    assert rows[2, kinds : kinds + 4].tolist() == [2, 2, 3, 0]
    assert rows[3, kinds : kinds + 6].tolist() == [3, 0, 48, 0, 1, 0]
    assert rows[4, kinds:].tolist() == [3, *range(STEP_WIDTH - kinds - 1)]
    assert encode_steps([]).shape == (0, STEP_WIDTH)


@pytest.mark.parametrize(
    ("key", "op_kind", "flops"),
    [
        # From the fixtures: ResNet-50 NHWC stem and a 1x1 conv, global/max pool, softmax-like, K80 conv.
        (
            '["12b88bedece6984af589a28b43e0f3c4", 1, 224, 224, 3, 7, 7, 3, 64, 1, 1, 1, 64, 1, 112, 112, 64]',
            "conv2d",
            2 * 112 * 112 * 64 * 7 * 7 * 3,
        ),
        (
            '["f4380bb1dc62422a69ad4a1a9771f927", 1, 28, 28, 512, 1, 1, 512, 1024, 1, 14, 14, 1024]',
            "conv2d",
            2 * 14 * 14 * 1024 * 512,
        ),
        ('["69115f188984ae34ede37c3b8ca40b43", 1, 7, 7, 2048, 1, 1, 1, 2048]', "pool", 7 * 7 * 2048),
        (
            '["a5612fdeb9db4d579a75ec225ea4c06a", 1, 112, 112, 64, 1, 1, 1, 64, 1, 56, 56, 64]',
            "pool",
            112 * 112 * 64,
        ),
        ('["d7b65649a4dd54becea0a52aabbc5af5", 1, 1000, 1, 1000]', "elementwise", 1000),
        (
            '["8a830aeb28cc45b189200eb204fd8825", 8, 32, 32, 512, 1, 1, 512, 256, '
            "1, 1, 1, 256, 8, 32, 32, 256]",
            "conv2d",
            2**31,
        ),
        # Hand-made keys of the other patterns.
        (
            '["00000000000000000000000000000000", 1, 64, 56, 56, 64, 64, 3, 3, 1, 64, 56, 56]',
            "conv2d",
            2 * 56 * 56 * 64 * 64 * 9,
        ),
        (
            '["00000000000000000000000000000000", 1, 112, 112, 32, 3, 3, 32, 1, 1, 112, 112, 32]',
            "depthwise_conv2d",
            2 * 112 * 112 * 32 * 9,
        ),
        (
            '["00000000000000000000000000000000", 1, 32, 112, 112, 32, 1, 3, 3, 1, 32, 56, 56]',
            "depthwise_conv2d",
            2 * 56 * 56 * 32 * 9,
        ),
        (
            '["00000000000000000000000000000000", 12, 128, 64, 12, 128, 64, 12, 128, 128]',
            "batch_matmul",
            2 * 12 * 128 * 128 * 64,
        ),
        (
            '["00000000000000000000000000000000", 1, 2048, 1000, 2048, 1000, 1, 1000]',
            "dense",
            2 * 1000 * 2048,
        ),
        ('["00000000000000000000000000000000", 16, 256, 256, 512, 16, 512]', "matmul", 2 * 16 * 512 * 256),
        (
            '["00000000000000000000000000000000", 1, 56, 56, 64, 1, 56, 56, 64, 1, 56, 56, 64]',
            "elementwise",
            2 * 56 * 56 * 64,
        ),
        ('["matmul_add", 1024, 1024, 1024, "float32"]', "matmul", 2 * 1024**3),
        ('["conv2d_layer", 1, 7, 7, 512, 512, 3, 3, [1, 1], [1, 1]]', "conv2d", 2 * 7 * 7 * 512 * 512 * 9),
    ],
)
def test_workload_key_op_kind_and_flops(key, op_kind, flops):
    info = parse_workload_key(key)
    assert (info.op_kind, info.flops) == (op_kind, flops)


def test_unrecognised_workload_keys_are_unknown():
    for key in ['["sparse_dense", 1, 2]', '["00000000000000000000000000000000", 3, 5, 7]', "not json", "[]"]:
        info = parse_workload_key(key)
        assert info.op_kind == "unknown" and math.isnan(info.flops)
    assert parse_workload_key('["sparse_dense", 1, 2]').function == "sparse_dense"


def test_conv2d_layer_shapes_from_registered_key():
    info = parse_workload_key('["conv2d_layer", 1, 7, 7, 512, 512, 3, 3, [1, 1], [1, 1]]')
    assert info.layout == "NCHW"
    assert info.shapes == ((1, 512, 7, 7), (512, 512, 3, 3), (1, 512, 7, 7))


def test_conversion_of_the_fixture_directory(ansor_dir, tmp_path):
    out = tmp_path / "ansor.parquet"
    seen = []
    stats = convert_records(ansor_dir, out, batch_size=10, progress=seen.append)
    assert stats.records == 29 and stats.files == 4 and stats.corrupt == 0
    assert seen == [10, 10, 9]
    frame = read_dataset(out)
    assert frame.attrs["hw_feature_names"] == list(HARDWARE_PARAM_NAMES)
    assert len(frame) == 29
    assert frame["target_id"].value_counts().to_dict() == {
        "llvm-core-avx2": 26,
        "cuda": 1,
        "llvm": 1,
        "cuda-sm_37": 1,
    }
    assert set(frame["candidate_kind"]) == {"ansor_steps"}
    assert frame["valid"].all() and frame["kernel_features"].isna().all()
    k80 = frame[frame["target_id"] == "cuda-sm_37"].iloc[0]
    assert k80["hw_features"].tolist() == list(K80_HW)
    assert k80["latency"] == pytest.approx(0.176356)
    assert k80["latencies"].tolist() == [0.176353, 0.176359]
    assert (k80["op_kind"], k80["flops"]) == ("conv2d", 2**31)
    assert len(k80["sequence_features"]) == len(json.loads(k80["candidate"])["i"][1][1]) == 39
    assert k80["candidate"] == (ansor_dir / "tenset-k80-sample.json").read_text().strip()
    cuda_v02 = frame[frame["target_id"] == "cuda"].iloc[0]
    assert all(math.isnan(v) for v in cuda_v02["hw_features"])
    resnet = frame[frame["target_id"] == "llvm-core-avx2"]
    assert resnet["task_id"].nunique() == 26
    assert (resnet["op_kind"].value_counts().to_dict()) == {"conv2d": 23, "pool": 2, "elementwise": 1}
    normalised = add_normalised_throughput(frame)
    assert normalised["norm_throughput"].tolist() == [1.0] * 29


def test_conversion_marks_failed_measurements_invalid(tmp_path):
    template = {"i": [['["k"]', "llvm -model=x", [1] * 8, "", 0, []], [[], [["CI", 1]]]], "v": "v0.6"}
    results = [[[2e-3, 4e-3], 0, 1.0, 5], [[1e10], 7, 1.0, 5], [[0.0], 0, 1.0, 5], [[1e-3], 0, 1.0, 5]]
    path = tmp_path / "errors.json"
    path.write_text("\n".join(json.dumps({**template, "r": r}) for r in results))
    frame = add_normalised_throughput(records_to_arrow(list(iter_file(path))).to_pandas())
    assert frame["valid"].tolist() == [True, False, False, True]
    assert frame["error_kind"].tolist() == [None, "run_timeout", "bad_cost", None]
    assert frame["latency"].iloc[0] == 3e-3 and math.isnan(frame["latency"].iloc[1])
    assert [len(v) for v in frame["latencies"]] == [2, 0, 0, 1]
    assert frame["norm_throughput"].tolist() == pytest.approx([1 / 3, 0.0, 0.0, 1.0])


def test_parallel_conversion_matches_serial(ansor_dir, tmp_path):
    tree = tmp_path / "measure_records"
    for hardware in ("a", "b"):
        (tree / hardware).mkdir(parents=True)
        for name in ("resnet-50-NHWC-B1-llvm.json", "tenset-k80-sample.json", "matmul.json"):
            shutil.copy(ansor_dir / name, tree / hardware / name)
    serial, parallel = tmp_path / "serial.parquet", tmp_path / "parallel.parquet"
    serial_stats = convert_records(tree, serial, batch_size=7)
    parallel_stats = convert_records(tree, parallel, batch_size=7, workers=2)
    assert serial_stats.records == parallel_stats.records == 56
    left, right = read_dataset(serial), read_dataset(parallel)
    assert left["candidate"].tolist() == right["candidate"].tolist()
    assert left["target_id"].tolist() == right["target_id"].tolist()
    assert set(left["target_id"]) == {"a", "b"}
    assert left["latency"].equals(right["latency"])


def test_conversion_without_sequence_features(ansor_dir, tmp_path):
    out = tmp_path / "lean.parquet"
    stats = convert_records(ansor_dir / "resnet-50-NHWC-B1-llvm.json", out, sequence_features=False)
    frame = read_dataset(out)
    assert stats.records == len(frame) == 26
    assert frame["sequence_features"].isna().all()
    assert frame["latency"].notna().all()


def test_irregular_steps_are_encoded_argument_by_argument():
    # An annotation given as a string and a split with an extra argument still encode in order.
    rows = encode_steps([["AN", 1, 2, "shared"], ["SP", 1, 0, 8, [2], 1, 7], ["CI", 3]])
    kinds = len(STEP_KINDS)
    assert rows[0, kinds : kinds + 4].tolist() == [1, 2, 2, 0]
    assert rows[1, kinds : kinds + 7].tolist() == [1, 0, 8, 2, 1, 7, 0]
    assert rows[2, kinds : kinds + 2].tolist() == [3, 0]
