"""The convolution layout study: how its timing runs are summarised."""

import pandas as pd
import pytest

from benchmarks.conv_layout import _corpus_markdown, _markdown, corpus_layouts, summarize


def _run(nchw, nhwc, onnxruntime=1.0):
    return {"cpu_stolen": 0.0, "ms": {"NCHW": nchw, "NHWC": nhwc, "ONNX Runtime": onnxruntime}}


def test_summary_takes_the_ratio_within_each_run_and_skips_a_run_with_a_failed_build():
    runs = [_run(2.0, 1.0), _run(4.0, 3.0), _run(2.0, 1.6), _run(2.0, None)]
    report = {
        "machine": {"cpu": "AMD EPYC"},
        "target": "llvm",
        "commit": "abc",
        "trials": 1000,
        "rounds": 5,
        "networks": {"net": {"runs": runs}},
    }
    net = summarize(report)["net"]
    assert net["runs"] == 3
    assert net["nhwc_over_nchw"] == pytest.approx([0.5, 0.75, 0.8])
    assert net["median_nhwc_over_nchw"] == pytest.approx(0.75)
    assert net["median_ms"] == pytest.approx({"NCHW": 2.0, "NHWC": 1.6, "ONNX Runtime": 1.0})
    assert "| net | 3 | 2.000 | 1.600 | 1.000 | 0.500, 0.750, 0.800 | 0.750 |" in _markdown(report)


def test_the_corpus_comparison_sums_each_layouts_fastest_records_of_the_collection_passes_by_calls():
    def record(network, task, latency, calls=1.0, valid=True, source="work/corpus/net__znver5-2c/db.json"):
        return dict(
            network=network, target_id="llvm/znver5/2", task_id=task, source=source, valid=valid,
            latency=latency, weight=calls,
        )  # fmt: skip

    corpus = pd.DataFrame(
        [
            record("net", "conv", 4e-3),
            record("net", "conv", 3e-3),
            record("net", "add", 1e-3, calls=2.0),
            record("net", "conv", 1e-4, valid=False),  # failed: no latency of its own
            record("net", "conv", 1e-4, source="work/bench_networks/znver5/net/db.json"),  # not the corpus
            record("net@nhwc", "conv_nhwc", 2e-3),
            record("net@nhwc", "add", 1e-3, calls=2.0),
            record("other", "conv", 1e-3),  # in one layout only
        ]
    )
    (row,) = corpus_layouts(corpus)
    assert (row["network"], row["target_id"]) == ("net", "llvm/znver5/2")
    assert row["records"] == {"NCHW": 4, "NHWC": 2} and row["tasks"] == {"NCHW": 2, "NHWC": 2}
    assert row["ms"] == pytest.approx({"NCHW": 5.0, "NHWC": 4.0})
    assert row["nhwc_over_nchw"] == pytest.approx(0.8)
    markdown = _corpus_markdown({"pack": "p", "commit": "abc", "networks": [row]})
    assert "geometric mean **0.800** over 1 networks" in markdown
