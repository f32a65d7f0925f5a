"""`tenset-tools collect`: planning, and a real collection measured through a TVM RPC tracker and server
started on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tvm.rpc

from tenset_tools import SHIPPED_DATASET
from tenset_tools.metaschedule import SIDECAR_FILE, read_sidecar
from tenset_tools.schema import read_dataset
from tvm_transfer.target import host_cpu_name
from tvm_transfer.tuning.collect import CpuTarget, add_store_features, collect, parse_targets, plan
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.workdir import WorkDir

LOOPBACK = "127.0.0.1"
DEVICE_KEY = "tvm-transfer-test"


def test_targets_parse_and_the_budget_is_spread_over_pairs(tmp_path):
    targets = parse_targets("znver4:2, x86-64-v3:1")
    assert targets == [CpuTarget("znver4", 2), CpuTarget("x86-64-v3", 1)]
    assert targets[1].target().attrs["num-cores"] == 1
    assert parse_targets("host:1") == [CpuTarget(host_cpu_name(), 1)]
    for bad in ("znver4", "znver4:0", ":2", "znver4:two"):
        with pytest.raises(ValueError, match="MCPU:CORES"):
            parse_targets(bad)
    jobs = plan(["mlp", "resnet_block"], targets, 11, tmp_path)
    assert [job.trials for job in jobs] == [3, 3, 3, 2]
    assert jobs[1].work_dir == tmp_path / "mlp__x86-64-v3-1c"
    assert jobs[0].measured() == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def _wait_for_device(port: int, processes: list[subprocess.Popen], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p.args for p in processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"RPC process exited early: {dead}")
        try:
            if DEVICE_KEY in tvm.rpc.connect_tracker(LOOPBACK, port).text_summary():
                return
        except (RuntimeError, ConnectionError, OSError):
            pass  # the tracker is still starting
        time.sleep(0.5)
    raise TimeoutError(f"no RPC server registered as {DEVICE_KEY!r} within {timeout} s")


@pytest.fixture
def rpc_tracker(tmp_path):
    """A TVM RPC tracker and one server registered under DEVICE_KEY, both on loopback only; yields the
    tracker's HOST:PORT and the server's log file."""
    # TVM's tracker needs tornado (a dev dependency); servers and the RPCRunner client do not.
    pytest.importorskip("tornado", reason="the TVM RPC tracker needs tornado (pip install tornado)")
    port, server_port = _free_port(), _free_port()
    log = tmp_path / "rpc_server.log"
    processes = []
    with open(log, "w") as server_log:
        try:
            processes.append(
                subprocess.Popen(
                    # --port-end: the tracker binds the first free port below it (default end 9199)
                    [
                        sys.executable,
                        "-m",
                        "tvm.exec.rpc_tracker",
                        "--host",
                        LOOPBACK,
                        "--port",
                        str(port),
                        "--port-end",
                        str(port + 1),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            server = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", LOOPBACK]
            server += ["--port", str(server_port), "--port-end", str(server_port + 20)]
            server += ["--tracker", f"{LOOPBACK}:{port}", "--key", DEVICE_KEY, "--custom-addr", LOOPBACK]
            processes.append(
                subprocess.Popen(server, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
            )
            _wait_for_device(port, processes)
            yield f"{LOOPBACK}:{port}", log
        finally:
            for process in processes:
                _signal_session(process, signal.SIGTERM)
            for process in processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
                # The server's own workers (popen_worker) share its session: end them, and it if it is
                # still running.
                _signal_session(process, signal.SIGKILL)
                process.wait(timeout=10)


def _signal_session(process: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to every process of ``process``'s session (it was started with a session of its own),
    so that the children it started do not outlive it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


OPTIONS = TuneOptions(trials_per_iter=4, population_size=16, progress=False)


def test_collect_locally_on_one_core_then_resume(tmp_path):
    out = tmp_path / "collected.parquet"
    arguments = (["mlp"], [CpuTarget("x86-64-v3", 1)], 4, tmp_path / "work", out)
    first = collect(*arguments, options=OPTIONS, progress=False)
    assert first.new_measurements == 4
    frame = read_dataset(out)
    assert len(frame) == first.stats.records == 4 and frame["valid"].all()
    assert set(frame["network"]) == {"mlp"} and set(frame["candidate_kind"]) == {"ms_trace"}
    assert set(frame["target_id"]) == {"llvm/x86-64-v3/1"}
    work_dir = first.jobs[0].work_dir
    assert (work_dir / SIDECAR_FILE).is_file()
    sidecar = read_sidecar(work_dir)
    weights = sidecar.weights
    assert sidecar.network == "mlp" and len(weights) == 3 and set(frame["task_id"]) <= set(weights)
    # The collection times candidates as MetaSchedule does.
    assert WorkDir(work_dir).settings().measure_caches == "warm"
    # The same command again: everything is measured already, nothing new is measured.
    again = collect(*arguments, options=OPTIONS, progress=False)
    assert again.new_measurements == 0 and len(read_dataset(out)) == 4


def test_collect_through_rpc(rpc_tracker, tmp_path):
    address, server_log = rpc_tracker
    out = tmp_path / "collected.parquet"
    targets = [CpuTarget(host_cpu_name(), 2)]
    result = collect(
        ["mlp"],
        targets,
        4,
        tmp_path / "work",
        out,
        options=OPTIONS,
        rpc=(address, DEVICE_KEY),
        progress=False,
    )
    assert result.new_measurements == 4
    frame = read_dataset(out)
    assert len(frame) == 4 and frame["valid"].all()
    assert set(frame["target_id"]) == {f"llvm/{host_cpu_name()}/2"}
    assert "load_module" in Path(server_log).read_text()  # the candidates ran on the RPC server


def test_store_features_of_collected_records_are_replayed_and_checked():
    shipped = read_dataset(SHIPPED_DATASET)
    records = shipped[shipped["network"] == "mlp"].groupby("target_id").head(6).reset_index(drop=True)
    stripped = records.assign(store_features=None)
    stripped.loc[0, "candidate"] = "[[], []"  # truncated JSON: cannot be replayed
    stripped.at[1, "kernel_features"] = stripped.at[1, "kernel_features"] + 1.0  # not the measured program
    filled, report = add_store_features(stripped, progress=False)
    assert (report.filled, report.unreplayable, report.mismatched) == (len(records) - 2, 1, 1)
    assert filled["store_features"].iloc[:2].isna().all()
    pairs = zip(filled["store_features"].iloc[2:], records["store_features"].iloc[2:], strict=True)
    for replayed, original in pairs:
        np.testing.assert_allclose(replayed, np.stack(list(original)), rtol=1e-5, atol=1e-6)
    assert stripped["store_features"].isna().all()  # the input frame is left alone
