"""The convolution layout study: how its timing runs are summarised."""

import pytest

from benchmarks.conv_layout import _markdown, summarize


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
