"""The reference runtimes of `compile`: PyTorch eager, torch.compile and ONNX Runtime run a small real
module on the same inputs and threads, agree with PyTorch, report what cannot run here as not available,
and are timed in interleaved rounds whose fastest round is kept."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

from tvm_transfer.runtimes import (
    ComparedModel,
    RuntimeResult,
    compare_runtimes,
    export_onnx,
    format_results,
    onnxruntime_options,
    time_interleaved,
    tvm_threads,
)


class ConvNet(torch.nn.Module):
    """A conv-ReLU-linear net with two outputs (logits and the pooled features)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc(features), features


@pytest.fixture
def net() -> ConvNet:
    torch.manual_seed(0)
    return ConvNet().eval()


@pytest.fixture
def image() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 12, 12), dtype=np.float32)


def numpy_convnet(net: ConvNet, x: np.ndarray) -> list[np.ndarray]:
    """The same net written in numpy: an independent implementation to check, as TVM's VM would be."""
    weight, bias = net.conv.weight.detach().numpy(), net.conv.bias.detach().numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = x.shape[2:]
    conv = np.zeros((x.shape[0], weight.shape[0], height, width), np.float32)
    for i in range(3):
        for j in range(3):
            window = padded[:, :, i : i + height, j : j + width]
            conv += np.einsum("nchw,oc->nohw", window, weight[:, :, i, j])
    features = np.maximum(conv + bias[None, :, None, None], 0).mean(axis=(2, 3))
    logits = features @ net.fc.weight.detach().numpy().T + net.fc.bias.detach().numpy()
    return [logits, features]


def by_name(results: list[RuntimeResult]) -> dict[str, RuntimeResult]:
    return {r.name: r for r in results}


def test_eager_and_onnxruntime_match_pytorch_and_are_timed(net, image):
    threads_before = torch.get_num_threads()
    model = ComparedModel("convnet", [image], net, None, threads=1)
    results = compare_runtimes(
        model,
        {"numpy": lambda: numpy_convnet(net, image)},
        runtimes=("eager", "onnxruntime"),
        rounds=2,
        min_seconds=0.02,
    )
    assert [r.name for r in results] == ["numpy", "PyTorch eager", "ONNX Runtime"]
    for r in results:
        assert r.status == "ok", r
        assert r.reference == "PyTorch eager"
        assert r.max_abs_error < 1e-4, r
        assert 0 < r.fastest_call_seconds <= r.seconds
    found = by_name(results)
    assert found["PyTorch eager"].max_abs_error == 0.0
    # Exporting to ONNX and creating the session is setup, not part of the timed calls.
    assert found["ONNX Runtime"].setup_seconds > found["ONNX Runtime"].seconds
    assert found["numpy"].setup_seconds is None
    assert torch.get_num_threads() == threads_before
    table = format_results(results, relative_to="PyTorch eager")
    assert "time / PyTorch eager" in table and "ONNX Runtime" in table


def test_torch_compile_matches_pytorch_and_its_compilation_is_not_timed(net, image):
    model = ComparedModel("convnet", [image], net, None, threads=1)
    (compiled,) = compare_runtimes(model, {}, runtimes=("torch.compile",), rounds=2, min_seconds=0.02)
    assert compiled.status == "ok", compiled
    assert compiled.reference == "PyTorch eager"
    assert compiled.max_abs_error < 1e-4
    assert 0 < compiled.seconds < compiled.setup_seconds


def test_a_wrong_candidate_is_measured_and_a_misshapen_one_fails(net, image):
    model = ComparedModel("convnet", [image], net, None, threads=1)
    calls = []

    def breaks_on_third_call() -> list[np.ndarray]:
        calls.append(1)
        if len(calls) >= 3:  # the first output and the warm-up call succeed
            raise MemoryError("out of arena")
        return numpy_convnet(net, image)

    results = by_name(
        compare_runtimes(
            model,
            {
                "off by one": lambda: [a + 1 for a in numpy_convnet(net, image)],
                "one output": lambda: numpy_convnet(net, image)[:1],
                "raises": lambda: 1 / 0,
                "breaks later": breaks_on_third_call,
            },
            runtimes=("eager",),
            rounds=1,
            min_seconds=0.01,
        )
    )
    assert results["off by one"].status == "ok"
    assert results["off by one"].max_abs_error == pytest.approx(1.0, abs=1e-5)
    assert results["one output"].status == "failed: 1 outputs, the reference has 2"
    assert results["one output"].seconds is None
    assert results["raises"].status == "failed: ZeroDivisionError: division by zero"
    assert results["breaks later"].status == "failed while timed: MemoryError: out of arena"
    assert results["breaks later"].max_abs_error < 1e-4 and results["breaks later"].seconds is None
    assert results["PyTorch eager"].seconds > 0 and results["off by one"].seconds > 0


def test_onnxruntime_spins_exactly_when_the_other_runtimes_do(monkeypatch):
    def spinning() -> set[str]:
        options = onnxruntime_options(2)
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
        keys = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
        return {options.get_session_config_entry(key) for key in keys}

    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")  # libgomp reads it case-insensitively
    assert spinning() == {"0"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert spinning() == {"1"}
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert spinning() == {"1"}


def test_missing_onnxruntime_is_not_available(net, image, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an environment without it looks like
    model = ComparedModel("convnet", [image], net, None, threads=1)
    results = by_name(compare_runtimes(model, {}, runtimes=("eager", "onnxruntime"), min_seconds=0.01))
    assert results["ONNX Runtime"].status.startswith("not available: onnxruntime cannot be imported")
    assert results["ONNX Runtime"].seconds is None
    assert results["PyTorch eager"].status == "ok"


def test_missing_cxx_compiler_makes_torch_compile_not_available(net, image):
    from torch._inductor import config

    model = ComparedModel("convnet", [image], net, None, threads=1)
    with config.patch({"cpp.cxx": (None, "/nonexistent/bin/c++")}):
        results = by_name(compare_runtimes(model, {}, runtimes=("torch.compile", "eager"), min_seconds=0.01))
    status = results["torch.compile"].status
    assert status.startswith("not available: no working C++ compiler for inductor"), status
    assert "/nonexistent/bin/c++" in status
    assert results["PyTorch eager"].status == "ok"


class DataDependentBranch(torch.nn.Module):
    """A Python branch on a tensor's value: torch.export (hence ONNX export) cannot capture it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x - 1


def test_a_model_onnx_export_refuses_is_not_available_on_onnxruntime(image):
    model = ComparedModel("branch", [image], DataDependentBranch().eval(), None, threads=1)
    results = by_name(compare_runtimes(model, {}, runtimes=("eager", "onnxruntime"), min_seconds=0.01))
    status = results["ONNX Runtime"].status
    assert status.startswith("not available: torch.onnx.export failed: TorchExportError"), status
    assert "\n" not in status and "\x1b" not in status
    assert results["PyTorch eager"].status == "ok"


def test_an_onnx_only_model_is_checked_against_onnxruntime(net, image, tmp_path):
    path = export_onnx(net, [image], tmp_path / "convnet.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["convnet.onnx"]  # one file, no external data
    model = ComparedModel("convnet", [image], None, path, threads=2)
    results = by_name(compare_runtimes(model, {"numpy": lambda: numpy_convnet(net, image)}, min_seconds=0.01))
    for key in ("PyTorch eager", "torch.compile"):
        assert results[key].status == "not available: no PyTorch module (the model is given as ONNX only)"
    assert results["ONNX Runtime"].status == "ok"
    assert results["ONNX Runtime"].max_abs_error == 0.0
    assert results["numpy"].reference == "ONNX Runtime"
    assert results["numpy"].max_abs_error < 1e-4


def test_time_interleaved_keeps_the_fastest_round():
    calls = {"slow at first": 0}

    def slow_at_first() -> None:
        # The warm-up call and round 0 take 50 ms a call; every later call 1 ms.
        calls["slow at first"] += 1
        time.sleep(0.05 if calls["slow at first"] <= 3 else 0.001)

    latencies = time_interleaved(
        {
            "slow at first": slow_at_first,
            "1 ms": lambda: time.sleep(0.001),
            "50 ms": lambda: time.sleep(0.05),
        },
        rounds=3,
        min_seconds=0.06,
    )
    seconds = {name: latency.seconds for name, latency in latencies.items()}
    assert seconds["50 ms"] >= 0.05  # a sleep never returns early
    assert seconds["1 ms"] >= 0.001
    assert seconds["slow at first"] >= 0.001
    # Clearly different costs keep their order (with room for a loaded machine's late wake-ups); the
    # 50 ms round of "slow at first" is not its result.
    assert seconds["1 ms"] < 0.025 < seconds["50 ms"]
    assert seconds["slow at first"] < 0.025
    for latency in latencies.values():
        assert latency.fastest_call_seconds <= latency.seconds


def test_time_interleaved_gives_the_fastest_call_beside_the_round_mean():
    calls = {"count": 0}

    def every_other_slow() -> None:
        # Like a busy period slowing every other call of a round: 1 ms and 40 ms in turn.
        calls["count"] += 1
        time.sleep(0.04 if calls["count"] % 2 else 0.001)

    latency = time_interleaved({"noisy": every_other_slow}, rounds=2, min_seconds=0.1)["noisy"]
    # Every round holds slow calls, so its mean is far above the undisturbed call; the fastest call is not.
    assert latency.seconds > 0.015
    assert 0.001 <= latency.fastest_call_seconds < 0.015


def test_time_interleaved_times_a_callable_warm_after_another_ran():
    last = {"caller": None}

    def cold_after_others(name: str) -> None:
        # 50 ms when another callable ran last (its caches and threads are cold), else 1 ms.
        time.sleep(0.05 if last["caller"] not in (None, name) else 0.001)
        last["caller"] = name

    calls = {name: (lambda name=name: cold_after_others(name)) for name in ("a", "b")}
    latencies = time_interleaved(calls, rounds=1, min_seconds=0.03)
    # Timed cold, each turn would average at least (50 + 1) / 2 ms a call.
    assert latencies["a"].seconds < 0.02 and latencies["b"].seconds < 0.02


def test_time_interleaved_names_what_failed_and_checks_its_settings():
    with pytest.raises(RuntimeError, match=r"^boom failed while timed: ValueError: no$"):
        time_interleaved(
            {"ok": lambda: None, "boom": lambda: (_ for _ in ()).throw(ValueError("no"))}, 1, 0.01
        )
    with pytest.raises(ValueError, match="rounds must be a positive integer, got 0"):
        time_interleaved({"ok": lambda: None}, 0, 0.01)
    with pytest.raises(ValueError, match="min_seconds must be a positive number of seconds, got -1"):
        time_interleaved({"ok": lambda: None}, 1, -1)


def test_settings_are_checked_before_anything_runs(net, image):
    with pytest.raises(ValueError, match=r"ComparedModel\.threads must be a positive integer, got 0"):
        ComparedModel("convnet", [image], net, None, threads=0)
    with pytest.raises(ValueError, match="needs a torch_module or an onnx_path"):
        ComparedModel("convnet", [image], None, None, threads=1)
    with pytest.raises(ValueError, match="is in training mode"):
        ComparedModel("convnet", [image], ConvNet(), None, threads=1)
    with pytest.raises(ValueError, match="must be a non-empty list of numpy arrays"):
        ComparedModel("convnet", [torch.from_numpy(image)], net, None, threads=1)
    model = ComparedModel("convnet", [image], net, None, threads=1)
    with pytest.raises(ValueError, match=r"runtimes must be distinct keys among .*got \['tvm'\]"):
        compare_runtimes(model, {}, runtimes=("tvm",))
    with pytest.raises(ValueError, match=r"candidate names \['PyTorch eager'\] are taken"):
        compare_runtimes(model, {"PyTorch eager": lambda: []}, runtimes=("eager",))


def in_new_thread(fn):
    """``fn()`` run in a new thread, which has no TVM thread pool yet (TVM keeps one per thread)."""
    outcome = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_candidates_run_with_the_model_thread_count_on_tvm_and_pytorch(net, image):
    import tvm

    threads = 2
    model = ComparedModel("convnet", [image], net, None, threads=threads)

    def compare():
        seen = []

        def candidate() -> list[np.ndarray]:
            seen.append((tvm.runtime.num_threads(), torch.get_num_threads(), len(os.sched_getaffinity(0))))
            return numpy_convnet(net, image)

        affinity = os.sched_getaffinity(0)
        (result,) = compare_runtimes(model, {"numpy": candidate}, runtimes=(), rounds=1, min_seconds=0.01)
        assert os.sched_getaffinity(0) == affinity
        return result, set(seen)

    result, seen = in_new_thread(compare)
    assert result.status == "ok" and result.reference == "PyTorch eager"
    # TVM's pool has the model's thread count and leaves the thread free to run on every CPU it had.
    assert seen == {(threads, threads, len(os.sched_getaffinity(0)))}


def test_a_tvm_pool_created_smaller_is_refused_with_the_setting_to_use(monkeypatch):
    import tvm

    monkeypatch.setenv("TVM_NUM_THREADS", "1")

    def small_pool_then_two():
        assert tvm.runtime.num_threads() == 1  # this thread's pool is created here, with one worker
        with tvm_threads(2):
            pass

    with pytest.raises(RuntimeError, match=r"created with 1 worker\(s\) .* set TVM_NUM_THREADS=2"):
        in_new_thread(small_pool_then_two)
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"), tvm_threads(0):
        pass
