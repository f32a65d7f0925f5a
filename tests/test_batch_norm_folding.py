"""The batch-norm folding study: how its timed pairs and networks are summarised."""

import math

import pytest

from benchmarks.batch_norm_folding import _markdown, summarize


def _run(epilogue, folded):
    return {
        "cpu_stolen": 0.0,
        "ms": {"epilogue": epilogue, "folded": folded, "ONNX Runtime": 1.0},
        "max_abs_error": {"epilogue": 1e-6, "folded": 2e-6, "ONNX Runtime": 1e-6},
    }


def test_summary_weighs_each_convolution_by_its_share_and_skips_failed_pairs():
    report = {
        "networks": {
            "net": {
                "tasks": [
                    # Pairs of (epilogue, folded) seconds; a pair with a failed side does not count.
                    {
                        "task": "a",
                        "share": 0.6,
                        "seconds": [[1e-4, 0.9e-4], [2e-4, 1.6e-4], [1e-4, math.inf]],
                    },
                    {"task": "b", "share": 0.2, "seconds": [[1e-5, 1.1e-5]]},
                    {"task": "never-ran", "share": 0.2, "seconds": [[math.inf, math.inf]]},
                ],
                "runs": [_run(2.0, 1.9), _run(2.2, 2.2), _run(2.0, 2.1)],
            }
        }
    }
    net = summarize(report)["net"]
    a, b = net["tasks"]
    assert (a["task"], a["pairs"], b["pairs"]) == ("a", 2, 1)
    assert a["median_ratio"] == pytest.approx(0.85) and a["fastest_ratio"] == pytest.approx(0.9)
    assert net["share"] == pytest.approx(0.8)
    # Share-weighted geometric mean of the medians: 0.85 with weight 3, 1.1 with weight 1.
    assert net["weighted_median_ratio"] == pytest.approx((0.85**3 * 1.1) ** 0.25)
    assert net["network_ratios"] == pytest.approx([0.95, 1.0, 1.05])
    assert net["median_network_ratio"] == pytest.approx(1.0)
    report.update(
        machine={"cpu": "a CPU", "cores": 2}, target="llvm", commit="abc", trials=200, top=4, rounds=5
    )
    markdown = _markdown(report)
    assert "| `a` | 60.0% | 2 | 0.850 | 0.900 | 100.0 |" in markdown
    assert "| 1 | 2.000 | 1.900 | 1.000 | 0.950 |" in markdown
