"""Work dirs under hostile conditions: a torn last line, two runs at once, a killed lock holder, Ctrl-C, and
a resumed run that must not measure a program twice."""

import collections
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tvm_ffi
from log_helpers import warnings_of
from tqdm import tqdm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from tenset_tools.command import Interrupted
from tenset_tools.metaschedule import RECORD_FILE, WORKLOAD_FILE, database_target_ids, mean_run_seconds
from tvm_transfer.cli import main
from tvm_transfer.search_strategy.unmeasured import (
    SkipMeasured,
    measured_program_keys,
    record_program_key,
)
from tvm_transfer.target import target_id
from tvm_transfer.tuning.operator import tune_workload
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.session import Measurement, records_of, top_records
from tvm_transfer.tuning.workdir import (
    LOCK_FILE,
    WorkDirBusyError,
    count_records,
    open_database,
    set_aside_torn_tails,
    work_dir_lock,
)
from tvm_transfer.workloads import make_workload

REPO = Path(__file__).resolve().parents[1]


def _program_counts(work_dir: Path) -> collections.Counter:
    """How often each (workload, program) pair appears in the work dir's database."""
    database = open_database(work_dir)
    return collections.Counter(
        (str(r.workload.mod.script()), tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod))
        for r in database.get_all_tuning_records()
    )


# ---- torn tails ----------------------------------------------------------------------------------------


def _lines(*items) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


def test_a_torn_last_line_is_set_aside_and_complete_lines_are_kept(tmp_path):
    (tmp_path / WORKLOAD_FILE).write_bytes(_lines(["h", "mod"]))
    complete = _lines([0, ["t1"]], [0, ["t2"]])
    (tmp_path / RECORD_FILE).write_bytes(complete + b'[0, ["t3", [0.1')
    with warnings_of("tvm_transfer.tuning.workdir") as messages:
        (side,) = set_aside_torn_tails(tmp_path)
    assert (tmp_path / RECORD_FILE).read_bytes() == complete
    assert side.read_bytes() == b'[0, ["t3", [0.1' and side.name.startswith(f"{RECORD_FILE}.torn-")
    (message,) = messages
    assert RECORD_FILE in message and side.name in message

    # A complete last line without its newline is kept and gets one; a clean file is left alone.
    (tmp_path / RECORD_FILE).write_bytes(complete + b'[0, ["t3"]]')
    assert set_aside_torn_tails(tmp_path) == []
    assert (tmp_path / RECORD_FILE).read_bytes() == complete + b'[0, ["t3"]]\n'
    assert set_aside_torn_tails(tmp_path) == [] and (tmp_path / WORKLOAD_FILE).read_bytes() == _lines(
        ["h", "mod"]
    )


def test_a_torn_line_ending_in_a_newline_is_set_aside_too(tmp_path):
    (tmp_path / WORKLOAD_FILE).write_bytes(_lines(["h", "mod"]) + b'["h2", "mo\n')
    (tmp_path / RECORD_FILE).write_bytes(b"")
    (side,) = set_aside_torn_tails(tmp_path)
    assert side.read_bytes() == b'["h2", "mo\n' and (tmp_path / WORKLOAD_FILE).read_bytes() == _lines(
        ["h", "mod"]
    )


@pytest.fixture(scope="module")
def tuned_dir(tmp_path_factory, target, matmul):
    """A real 8-trial tuning run of a 64^3 matmul (two batches of 4, population 16)."""
    work_dir = tmp_path_factory.mktemp("tuned")
    options = ms_options(trials=8)
    tune_workload(matmul, work_dir, target=target, options=options, reference=False)
    return work_dir


def ms_options(trials: int):
    from tvm_transfer.tuning.session import TuneOptions

    return TuneOptions(trials=trials, trials_per_iter=4, population_size=16, progress=False)


def test_resume_after_a_torn_tail_keeps_every_complete_record(tuned_dir, tmp_path, target, matmul):
    work_dir = tmp_path / "torn"
    work_dir.mkdir()
    for name in (WORKLOAD_FILE, RECORD_FILE):
        (work_dir / name).write_bytes((tuned_dir / name).read_bytes())
    records = (work_dir / RECORD_FILE).read_bytes()
    last = records.rstrip(b"\n").rfind(b"\n") + 1
    cut = last + (len(records) - last) // 2
    (work_dir / RECORD_FILE).write_bytes(records[:cut])
    # What target the records are for reads without the database, the torn line left out.
    assert database_target_ids(work_dir) == {target_id(target)}
    with pytest.raises(Exception, match="parallel_for_dynamic"):  # what TVM alone does with it
        ms.database.JSONDatabase(work_dir=str(work_dir))

    with warnings_of("tvm_transfer.tuning.workdir") as messages:
        result = tune_workload(matmul, work_dir, target=target, options=ms_options(trials=8), reference=False)
    # The 7 complete records are kept; MetaSchedule measures a whole batch even when fewer trials remain.
    assert result.trials == 7 + result.new_trials and result.new_trials >= 1
    (side,) = work_dir.glob(f"{RECORD_FILE}.torn-*")
    assert side.read_bytes() == records[last:cut]
    assert (work_dir / RECORD_FILE).read_bytes().startswith(records[:last])
    assert len(messages) == 1 and side.name in messages[0]


def test_top_records_are_the_fastest_measured_ones_and_add_no_workload(tuned_dir, target, matmul):
    measured = records_of(open_database(tuned_dir), matmul.ir_module())
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(matmul.ir_module())
    for record, seconds in zip(measured, (3e-3, 1e10, 1e-3, 2e-3), strict=False):
        database.commit_tuning_record(
            ms.database.TuningRecord(record.trace, workload, [seconds], target, record.args_info)
        )
    assert [r.run_secs[0].value for r in top_records(database, matmul.ir_module(), 4)] == [1e-3, 2e-3, 3e-3]
    assert len(top_records(database, matmul.ir_module(), 2)) == 2

    other = make_workload("matmul", (32, 32, 32)).ir_module()
    assert top_records(database, other, 3) == [] and not database.has_workload(other)


def test_a_corrupt_middle_line_is_a_named_error(tmp_path):
    (tmp_path / WORKLOAD_FILE).write_bytes(_lines(["h", "mod"]))
    (tmp_path / RECORD_FILE).write_bytes(b"not json\n" + _lines([0, ["t"]]))
    with pytest.raises(Exception, match=rf"{tmp_path}: TVM cannot read this MetaSchedule database"):
        open_database(tmp_path)


# ---- never measure a program twice ----------------------------------------------------------------------


@derived_object
class _PrefersKnownPrograms(PyCostModel):
    """Scores the programs in ``keys`` 1 and every other 0, as a model trained on them rates the best
    measured ones: the situation in which MetaSchedule's evolution proposes them again."""

    def __init__(self, keys: set[int]) -> None:
        self.keys = keys

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context, candidates, results) -> None:
        pass

    def predict(self, context, candidates) -> np.ndarray:
        return np.array([float(tvm_ffi.structural_hash(c.sch.mod) in self.keys) for c in candidates])


def _context(mod, target, strategy, rand_state: int) -> ms.TuneContext:
    return ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
        task_name="task", rand_state=rand_state, num_threads=1,
    )  # fmt: skip


def _proposed_keys(strategy, mod, target, database, model) -> set[int]:
    context = _context(mod, target, strategy, rand_state=3)
    strategy = context.search_strategy
    strategy.pre_tuning(8, 8, context.generate_design_space(), database, model)
    candidates = strategy.generate_measure_candidates() or []
    strategy.post_tuning()
    return {tvm_ffi.structural_hash(c.sch.mod) for c in candidates}


@pytest.fixture(params=["matmul in memory", "layout-rewritten layer read back from a file"])
def task_and_database(request, matmul, target, tmp_path):
    """A task and an empty database. The second is the case of a resumed run: a dense layer whose weight
    layout MetaSchedule rewrites (records read back from a file spell that annotation differently from the
    post-processor that wrote it) and a database that is written, then opened again from its files."""
    if request.param == "matmul in memory":
        return matmul.ir_module(), ms.database.MemoryDatabase(), lambda database: database
    layer = extract_network_tasks("mlp", target)[0].dispatched[0]

    def read_back(_written):
        return ms.database.JSONDatabase(work_dir=str(tmp_path))

    return layer, ms.database.JSONDatabase(work_dir=str(tmp_path)), read_back


def test_skip_measured_never_proposes_a_program_the_database_holds(task_and_database, target):
    mod, database, reopen = task_and_database
    evolution = {"population_size": 16, "init_min_unmeasured": 8}
    workload = database.commit_workload(mod)
    # "Measure" the first batch an evolutionary search proposes.
    context = _context(mod, target, ms.search_strategy.EvolutionarySearch(**evolution), rand_state=1)
    strategy = context.search_strategy
    strategy.pre_tuning(8, 8, context.generate_design_space(), database, ms.cost_model.RandomModel())
    for seconds, candidate in enumerate(strategy.generate_measure_candidates()):
        record = ms.database.TuningRecord(
            candidate.sch.trace, workload, [1e-3 * (1 + seconds)], target, candidate.args_info
        )
        database.commit_tuning_record(record)
    database = reopen(database)
    measured = measured_program_keys(database, context)
    assert len(measured) == 8

    model = _PrefersKnownPrograms(measured)
    again = _proposed_keys(ms.search_strategy.EvolutionarySearch(**evolution), mod, target, database, model)
    assert again & measured  # MetaSchedule's own strategy measures some of them again
    skipping = SkipMeasured(ms.search_strategy.EvolutionarySearch(**evolution))
    fresh = _proposed_keys(skipping, mod, target, database, model)
    assert fresh and not fresh & measured


def test_a_record_whose_trace_does_not_replay_on_its_task_is_left_out(matmul, target):
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(matmul.ir_module())
    conv2d = _context(make_workload("conv2d").ir_module(), target, None, rand_state=1)
    database.commit_tuning_record(
        ms.database.TuningRecord(conv2d.generate_design_space()[0].trace, workload, [1e-3], target)
    )
    matmul_context = _context(matmul.ir_module(), target, None, rand_state=1)
    with pytest.raises(ValueError, match="does not replay"):
        record_program_key(database.get_all_tuning_records()[0].trace, matmul_context)
    assert measured_program_keys(database, matmul_context) == set()


@pytest.mark.slow
def test_a_resumed_run_measures_no_program_twice(tuned_dir, tmp_path, target, matmul):
    work_dir = tmp_path / "resumed"
    work_dir.mkdir()
    for name in (WORKLOAD_FILE, RECORD_FILE):
        (work_dir / name).write_bytes((tuned_dir / name).read_bytes())
    for trials in (16, 24):
        tune_workload(matmul, work_dir, target=target, options=ms_options(trials), reference=False)
    counts = _program_counts(work_dir)
    assert sum(counts.values()) == 24 and max(counts.values()) == 1


# ---- the lock -------------------------------------------------------------------------------------------

_HOLD = """
import os, signal, sys, time
from tvm_transfer.tuning.workdir import work_dir_lock
with work_dir_lock(sys.argv[1]):
    print("held", flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(sys.argv[2]))
"""


def _holder(work_dir: Path, how: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HOLD), str(work_dir), how], stdout=subprocess.PIPE, env=env
    )
    assert process.stdout.readline().strip() == b"held"
    return process


def test_a_second_run_is_refused_naming_the_holder_or_waits(tmp_path, capsys):
    holder = _holder(tmp_path, "3")
    held_at = time.monotonic()
    try:
        busy = rf"{tmp_path} is in use by pid {holder.pid} \(.*started"
        with pytest.raises(WorkDirBusyError, match=busy), work_dir_lock(tmp_path):
            pass
        code = main(["tune", "matmul", "--shape", "8,8,8", "--work-dir", str(tmp_path), "--no-reference"])
        # One error line (an info line may precede it, e.g. that no transfer pack is installed).
        (line,) = [text for text in capsys.readouterr().err.splitlines() if ": error: " in text]
        assert code == 1 and f"pid {holder.pid}" in line and "--wait" in line
        with warnings_of("tvm_transfer.tuning.workdir") as messages, work_dir_lock(tmp_path, wait=True):
            assert time.monotonic() - held_at > 2.5  # got the lock only once the holder let it go
        assert len(messages) == 1 and "waiting for it to end" in messages[0]
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holders_lock_is_taken_over_with_a_note(tmp_path):
    holder = _holder(tmp_path, "kill")
    holder.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    # Re-entrant within a process: the inner block shares the outer one's lock.
    with (
        warnings_of("tvm_transfer.tuning.workdir") as messages,
        work_dir_lock(tmp_path),
        work_dir_lock(tmp_path),
    ):
        pass
    (note,) = messages
    assert f"took over the stale lock of pid {holder.pid}" in note
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released cleanly: nothing stale left


# ---- Ctrl-C ---------------------------------------------------------------------------------------------


class _InterruptingBar(tqdm):
    """A progress bar that presses Ctrl-C (a real SIGINT to this process) once it shows the first batch of
    4 candidates."""

    def update(self, n=1):
        super().update(n)
        if self.n >= 4:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_during_tuning_says_what_was_kept(tmp_path, target, matmul):
    bar = _InterruptingBar(file=io.StringIO())
    from tvm_transfer.tuning.session import tune_contexts

    context = ms.TuneContext(
        mod=matmul.ir_module(), target=target, space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=16, init_min_unmeasured=8),
        task_name="matmul", rand_state=1, num_threads=1,
    )  # fmt: skip
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in the background
    with pytest.raises(Interrupted, match=rf"4 measured records kept in {tmp_path}"):
        tune_contexts([context], [1.0], tmp_path, "xgboost", ms_options(16), Measurement(progress_bar=bar))
    assert count_records(tmp_path) == 4 == len(records_of(open_database(tmp_path), matmul.ir_module()))
    assert signal.getsignal(signal.SIGINT) is before  # the handler is restored


@derived_object
class _InterruptOnTask(PyCostModel):
    """Random scores; presses Ctrl-C when asked to score candidates of the task named ``task``."""

    def __init__(self, task: str) -> None:
        self.task = task
        self._rng = np.random.default_rng(0)

    def predict(self, context, candidates):
        if context.task_name == self.task:
            os.kill(os.getpid(), signal.SIGINT)
        return self._rng.uniform(size=len(candidates))

    def update(self, context, candidates, results):
        pass

    def load(self, path):
        raise NotImplementedError

    def save(self, path):
        raise NotImplementedError


def test_ctrl_c_in_the_first_round_keeps_the_batches_measured(tmp_path, target, matmul):
    # The gradient scheduler collects every task's first batch only once each task has had one; a run
    # stopped while searching the second task has measured the first task's batch but not collected it.
    from tvm_transfer.tuning.session import tune_contexts

    search = ms.search_strategy.EvolutionarySearch
    contexts = [
        ms.TuneContext(
            mod=workload.ir_module(),
            target=target,
            space_generator="post-order-apply",
            search_strategy=search(population_size=16, init_min_unmeasured=8),
            task_name=name,
            rand_state=1,
            num_threads=1,
        )
        for name, workload in (("first", matmul), ("second", make_workload("matmul", (32, 32, 32))))
    ]
    bar = tqdm(file=io.StringIO())
    with pytest.raises(Interrupted, match=rf"4 measured records kept in {tmp_path}"):
        model, measure = _InterruptOnTask("second"), Measurement(progress_bar=bar)
        tune_contexts(contexts, [1.0, 1.0], tmp_path, model, ms_options(16), measure)
    kept = records_of(open_database(tmp_path), matmul.ir_module())
    assert len(kept) == 4 and all(np.isfinite(mean_run_seconds(r.run_secs)) for r in kept)
    assert bar.n == 4  # the bar showed them as they were measured


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_is_one_line_and_resumable(tmp_path):
    command = [sys.executable, "-m", "tvm_transfer.cli", "tune", "matmul", "--shape", "64,64,64"]
    command += ["--trials", "64", "--trials-per-iter", "4", "--population", "16", "--no-reference", "--quiet"]
    command += ["--work-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, env=env, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while count_records(tmp_path) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal does: the whole process group
    _, err = process.communicate(timeout=120)
    lines = [line for line in err.splitlines() if not line.startswith("[")]
    assert process.returncode == 130
    assert (
        lines[-1].startswith("tvm-transfer tune: interrupted;")
        and "resume with: tvm-transfer tune" in lines[-1]
    )
    assert "Traceback" not in err
