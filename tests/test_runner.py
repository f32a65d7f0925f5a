"""The timed runner and the shared workers. On real measurements: a candidate that runs past the deadline
has its worker killed and fails saying so, and the next candidate is measured by a fresh worker; each
candidate is measured once and handed on as measured; the runs of one process share their workers, and a
worker killed in one run leaves the next one measuring; a runner's worker is replaced after a set number
of measurements (its memory grows with each). On scripted measurements: a run stopped half way hands on
what it measured, once."""

from __future__ import annotations

from ms_helpers import sample_candidates, tune_context
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

import tvm_transfer.runner
from tvm_transfer.runner import (
    TimedRunner,
    evaluator_config,
    local_runner,
    measuring_workers,
    runner_seconds,
    shared_builder,
)


def _built_inputs(target, matmul) -> list[ms.runner.RunnerInput]:
    """Runner inputs of two sampled schedules of ``matmul``, built for ``target``."""
    candidates = sample_candidates(tune_context(matmul, target), 2)
    builds = shared_builder().build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    return [
        ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info)
        for b, c in zip(builds, candidates, strict=True)
    ]


def test_a_measurement_past_the_deadline_is_killed_and_the_next_one_runs(target, matmul):
    inputs = _built_inputs(target, matmul)
    # Each measurement lasts at least 30 s, well inside the local runner's own timeout of 60 s.
    runner = TimedRunner(local_runner(number=1, min_repeat_ms=30_000, timeout_sec=60), deadline_sec=2)
    try:
        (killed,) = [f.result() for f in runner.run(inputs[:1])]
        assert killed.error_msg.startswith("TimedRunner: no result after 2 s") and runner.overruns == 1
        # Killed at the deadline, not measured to the end: the candidate's wall time is the deadline plus
        # the start of a fresh worker (seconds on a slow machine).
        assert runner.walls[str(inputs[0].artifact_path)] < 20
        runner.deadline_sec = 60
        runner.inner.evaluator_config = evaluator_config(number=1, repeat=1, min_repeat_ms=0)
        (measured,) = [f.result() for f in runner.run(inputs[1:])]
        assert measured.error_msg is None and 0 < runner_seconds(measured) < 1
    finally:
        runner.pool.shutdown()


def test_runs_in_one_process_share_workers_and_a_worker_killed_in_one_leaves_the_next_measuring(
    target, matmul
):
    inputs = _built_inputs(target, matmul)
    first_builder, first = measuring_workers(target, min_repeat_ms=0)
    second_builder, second = measuring_workers(target, min_repeat_ms=0)
    assert first_builder is second_builder and first is not second and first.inner is second.inner
    assert first.pool is not measuring_workers(target, min_repeat_ms=1)[1].pool
    (before,) = [f.result() for f in first.run(inputs[:1])]
    worker = _worker_pid(first)
    first.deadline_sec = 0  # killed as it starts measuring
    (killed,) = [f.result() for f in first.run(inputs[:1])]
    assert before.error_msg is None and killed.error_msg.startswith("TimedRunner: no result after 0 s")
    # A killed job leaves its artifact's unpacked directory behind, so another candidate is measured next.
    (after,) = [f.result() for f in second.run(inputs[1:])]
    assert after.error_msg is None and 0 < runner_seconds(after) < 1
    assert _worker_pid(second) != worker


def _worker_pid(runner) -> int:
    """The process id of the one worker of ``runner`` (a local runner or a timed runner around one)."""
    return next(iter(runner.pool._worker_map.values()))._proc.pid


def test_a_runners_worker_is_replaced_after_its_uses_and_the_next_measurement_runs(
    target, matmul, monkeypatch
):
    monkeypatch.setattr(tvm_transfer.runner, "RUNNER_WORKER_USES", 2)
    inputs = _built_inputs(target, matmul)
    runner = local_runner(number=1, min_repeat_ms=0)
    try:
        pids, results = [], []
        for runner_input in [*inputs, *inputs]:
            results += [f.result() for f in runner.run([runner_input])]
            pids.append(_worker_pid(runner))
        assert all(r.error_msg is None and 0 < runner_seconds(r) < 1 for r in results)
        assert pids[0] == pids[1] and pids[2] == pids[3] and pids[1] != pids[2]
    finally:
        runner.pool.shutdown()


@derived_object
class CountingRunner(TimedRunner._cls):
    """The timed runner, keeping the seconds of every measurement it makes of each artifact."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, list[float]] = {}

    def _measure(self, runner_input: ms.runner.RunnerInput) -> ms.runner.RunnerResult:
        result = super()._measure(runner_input)
        self.seconds.setdefault(str(runner_input.artifact_path), []).append(runner_seconds(result))
        return result


def test_each_candidate_is_measured_once_and_handed_on_as_measured(target, matmul):
    inputs = _built_inputs(target, matmul)
    missing = ms.runner.RunnerInput("/nonexistent/artifact.tar", "cpu", inputs[0].args_info)
    runner = CountingRunner(local_runner(number=1, min_repeat_ms=0))
    handed = []
    runner.on_result = lambda runner_input, result: handed.append((str(runner_input.artifact_path), result))
    try:
        results = [f.result() for f in runner.run([*inputs, missing])]
    finally:
        runner.pool.shutdown()
    paths = [str(i.artifact_path) for i in (*inputs, missing)]
    assert [len(runner.seconds[path]) for path in paths] == [1, 1, 1]
    assert [path for path, _ in handed] == paths
    assert all(h.same_as(r) for (_, h), r in zip(handed, results, strict=True))
    for path, result in zip(paths[:2], results[:2], strict=True):
        assert result.error_msg is None and runner_seconds(result) == runner.seconds[path][0]
    assert results[2].error_msg


def _result(seconds: float | None) -> ms.runner.RunnerResult:
    """A measured result of ``seconds``, or a failed one (``None``)."""
    if seconds is None:
        return ms.runner.RunnerResult(run_secs=None, error_msg="failed")
    return ms.runner.RunnerResult(run_secs=[seconds], error_msg=None)


@derived_object
class ScriptedRunner(TimedRunner._cls):
    """The timed runner with its measurements taken from a script: per artifact, the seconds of its
    measurement (``None``: it fails), raising ``KeyboardInterrupt`` when the script says ``"stop"``."""

    def __init__(self, script: dict[str, list]) -> None:
        super().__init__(local_runner())
        self.script = {path: list(steps) for path, steps in script.items()}

    def _measure(self, runner_input: ms.runner.RunnerInput) -> ms.runner.RunnerResult:
        step = self.script[str(runner_input.artifact_path)].pop(0)
        if step == "stop":
            raise KeyboardInterrupt
        return _result(step)


def _scripted_run(script: dict[str, list]) -> tuple[list, list, dict]:
    """Run ``script``'s artifacts through a :class:`ScriptedRunner`: the results (``None`` when the run was
    stopped), what was handed on (path, seconds) and what is left of the script."""
    runner = ScriptedRunner(script)
    handed = []
    runner.on_result = lambda runner_input, result: handed.append(
        (str(runner_input.artifact_path), runner_seconds(result))
    )
    inputs = [ms.runner.RunnerInput(path, "cpu", []) for path in script]
    try:
        results = [runner_seconds(f.result()) for f in runner.run(inputs)]
    except (KeyboardInterrupt, RuntimeError):  # the interrupt as it comes back through TVM's FFI
        results = None
    finally:
        runner.pool.shutdown()
    return results, handed, runner.script


def test_a_run_stopped_half_way_hands_on_each_measured_candidate_once():
    results, handed, left = _scripted_run({"a": [2.0], "b": [None], "c": ["stop"], "d": [4.0]})
    assert results is None and handed == [("a", 2.0), ("b", float("inf"))]
    assert left == {"a": [], "b": [], "c": [], "d": [4.0]}  # "d" was never measured
