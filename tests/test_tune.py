"""The high-level API and CLI on real (small) tuning runs."""

import json
import logging
from dataclasses import replace

import numpy as np
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.cli import main
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.networks import constant_bytes, load_model, relax_module
from tvm_transfer.runner import COLD_RUNS
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.network_profile import VM_BUILTINS, profile_vm
from tvm_transfer.tuning.operator import best_schedule, tune_workload
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.repick import (
    repick,
    repick_in_network,
    repick_records,
    resolve_repick_mode,
)
from tvm_transfer.tuning.run import RunConfig, extract_network_tasks, resolve_measure_caches
from tvm_transfer.tuning.session import Measurement
from tvm_transfer.tuning.workdir import WorkDir, open_database


def test_tuning_resumes_from_the_work_dir_and_the_best_schedule_is_correct(
    target, matmul, small_options, tmp_path
):
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    ms_logger.setLevel(logging.WARNING)
    first = tune_workload(
        matmul, tmp_path, target=target, options=replace(small_options, trials=8), reference=False
    )
    assert ms_logger.level == logging.WARNING  # MetaSchedule's set-up leaves it at DEBUG; we restore it
    assert (first.new_trials, first.trials) == (8, 8)
    assert np.isfinite(first.best_seconds) and first.gflops > 0
    assert len(first.curve) == 8 and first.curve[-1] == pytest.approx(first.best_seconds, rel=1e-6)

    second = tune_workload(matmul, tmp_path, target=target, options=small_options, reference=False)
    # Only the missing trials are run; a batch from which programs measured before were dropped counts
    # short, so MetaSchedule may ask for one more batch.
    assert second.trials == 8 + second.new_trials and 8 <= second.new_trials < 16
    assert second.best_seconds <= first.best_seconds

    third = tune_workload(matmul, tmp_path, target=target, options=small_options, reference=False)
    assert (third.new_trials, third.trials) == (0, second.trials)

    schedule = best_schedule(matmul, tmp_path, target)
    inputs = matmul.random_inputs(seed=7)
    executable = tvm.compile(schedule.mod, target=target)
    args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.tensor(np.zeros((64, 64), np.float32))]
    executable["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), matmul.reference(inputs), rtol=1e-4, atol=1e-4)


def test_resumed_run_teaches_the_cost_model_the_failures_of_the_interrupted_one(
    target, matmul, small_options, tmp_path
):
    tune_workload(matmul, tmp_path, target=target, options=replace(small_options, trials=8), reference=False)
    # MetaSchedule stores a failed candidate with run_secs [1e10]: make the first record one.
    path = tmp_path / "database_tuning_record.json"
    lines = path.read_text().splitlines()
    record = json.loads(lines[0])
    record[1][1] = [1e10]
    path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")

    model = make_cost_model("multilevel", use_lowered_features=False)
    tune_workload(
        matmul,
        tmp_path,
        target=target,
        options=small_options,
        reference=False,
        plan=TuningPlan(cost_model=model),
    )
    # The first update is the warm start: 8 earlier records, the doctored one as a failure (inf cost).
    assert len(model._costs) >= 8
    assert sum(not np.isfinite(c) for c in model._costs[:8]) == 1


def test_tuned_network_compiles_and_matches_pytorch(target, small_options, tmp_path):
    result = tune_network(
        RunConfig.make("mlp", tmp_path, target=target, options=replace(small_options, trials=24))
    )
    assert [t[0] for t in result.tasks] and all(trials >= 1 for *_, trials in result.tasks)
    assert sum(trials for *_, trials in result.tasks) == 24
    assert np.isfinite(result.weighted_latency)
    compiled = compile_network(
        RunConfig.make("mlp", tmp_path, target=target), runtimes=("eager",), rounds=1, profile=True
    )
    assert compiled.tuned_tasks == (len(result.tasks), len(result.tasks))
    assert compiled.max_abs_error < 1e-4
    assert compiled.tvm.seconds > 0 and compiled.results[1].name == "PyTorch eager"
    # The profile names every tuned task's function with its record's latency, and finds no more time
    # in the network's functions than the network takes (each call may add the hook's microseconds).
    profile = compiled.profile
    tuned = {f.name: f for f in profile.functions if f.tuned_seconds is not None}
    assert {name.removesuffix("_prepacked") for name in tuned} >= {name for name, *_ in result.tasks}
    assert all(np.isfinite(f.tuned_seconds) and f.warm_seconds > 0 for f in tuned.values())
    assert VM_BUILTINS in {f.name for f in profile.functions}
    calls = sum(f.calls for f in profile.functions)
    assert 0 < profile.function_seconds < profile.latency_seconds + calls * 50e-6
    # The round log has one row per measured batch, ending at the budget with every task's best.
    assert [row["trials"] for row in result.rounds][-1] == 24
    assert result.rounds[-1]["estimated_ms"] == pytest.approx(result.weighted_latency * 1e3, rel=1e-4)
    # Built re-picked: each heavy task's top records re-timed together, the fastest of them built.
    assert compiled.repicked and "re-picked the schedules" in compiled.table()
    assert all(r.candidates >= 2 and r.seconds <= r.best_record_seconds for r in compiled.repicked)
    assert compiled.repick_mode == "warm" and "together, warm" in compiled.table()  # as tuned, by default
    database = open_database(tmp_path)
    tasks = extract_network_tasks(load_model("mlp"), target)
    _, cold = repick_records(database, tasks, target, top_k=2, rounds=1, share=1e-9, cold_caches=True)
    assert len(cold) == 1 and np.isfinite(cold[0].seconds) and np.isfinite(cold[0].best_record_seconds)
    repicked, (pick, *others) = repick_records(database, tasks, target, top_k=2, rounds=1, share=1e-9)
    assert not others  # any share above 0 is reached by the heaviest task alone
    (task,) = [t for t in tasks if t.task_name == pick.task]
    built = repicked.query_tuning_record(task.dispatched[0], target, "main")
    assert [float(s) for s in built.run_secs] == [pick.seconds]
    assert task.weight * pick.recorded_seconds == max(
        t.weight * float(database.get_top_k(database.commit_workload(t.dispatched[0]), 1)[0].run_secs[0])
        for t in tasks
    )
    # In the network: one build per candidate rank; the pick is the candidate whose function ran fastest
    # there, and a build from the re-picked database still matches PyTorch.
    model = load_model("mlp")
    mod = relax_module(model)
    in_network, picks = repick_in_network(database, tasks, target, mod, model.inputs, top_k=2, share=1.0)
    assert {p.task for p in picks} == {t.task_name for t in tasks}
    for p in picks:
        assert p.candidates == 2 and np.isfinite(p.seconds) and p.seconds <= p.best_record_seconds
        (task,) = [t for t in tasks if t.task_name == p.task]
        built = in_network.query_tuning_record(task.dispatched[0], target, "main")
        assert [float(s) for s in built.run_secs] == [p.seconds]
    networked = compile_network(
        RunConfig.make("mlp", tmp_path, target=target), runtimes=("eager",), rounds=1, repick_mode="network"
    )
    assert networked.max_abs_error < 1e-4 and "in the network" in networked.table()


@pytest.mark.parametrize(("top_k", "rounds", "share"), [(1, 1, 0.9), (2, 0, 0.9), (2, 1, 0.0), (2, 1, 1.5)])
def test_repick_refuses_settings_it_cannot_pick_with(target, top_k, rounds, share):
    with pytest.raises(ValueError, match=r"top_k|share"):
        repick_records(ms.database.MemoryDatabase(), [], target, top_k=top_k, rounds=rounds, share=share)


def test_repick_refuses_an_unknown_mode(target):
    with pytest.raises(ValueError, match="unknown re-pick mode 'hot'"):
        repick("hot", ms.database.MemoryDatabase(), [], target, None, [])


def test_auto_repick_is_cold_only_where_the_weights_outgrow_the_last_level_cache():
    mod = relax_module(load_model("mlp"))
    weights = constant_bytes(mod)
    assert resolve_repick_mode("auto", mod, cache_bytes=weights) == "warm"
    assert resolve_repick_mode("auto", mod, cache_bytes=weights - 1) == "cold"
    for mode in ("none", "warm", "cold", "network"):  # a named mode is kept, whatever the network
        assert resolve_repick_mode(mode, mod, cache_bytes=1) == mode
    with pytest.raises(ValueError, match="unknown re-pick mode 'hot'"):
        resolve_repick_mode("hot", mod)


def test_a_network_tuned_with_cold_caches_times_every_candidate_in_single_flushed_runs(
    target, small_options, tmp_path
):
    model = load_model("mlp")
    options = replace(small_options, trials=8)
    tune_network(RunConfig.make(model, tmp_path / "warm", target=target, options=options))
    tune_network(
        RunConfig.make(model, tmp_path / "cold", target=target, options=options, measure_caches="cold")
    )
    runs = {
        arm: {len(r.run_secs) for r in open_database(tmp_path / arm).get_all_tuning_records()}
        for arm in ("warm", "cold")
    }
    # The warm runner keeps the mean of its back-to-back runs; the cold one every flushed single run.
    assert runs == {"warm": {1}, "cold": {COLD_RUNS}}
    # Each work dir records how it was timed, and refuses the other way before measuring anything.
    for arm, other in (("warm", "cold"), ("cold", "warm")):
        assert WorkDir(tmp_path / arm).settings().measure_caches == arm
        before = len(open_database(tmp_path / arm).get_all_tuning_records())
        more = replace(options, trials=16)
        with pytest.raises(ValueError, match=f"timed {arm}, and records timed {other} would not compare"):
            tune_network(
                RunConfig.make(model, tmp_path / arm, target=target, options=more, measure_caches=other)
            )
        assert len(open_database(tmp_path / arm).get_all_tuning_records()) == before
    command = ["tune-network", "mlp", "--work-dir", str(tmp_path / "warm"), "--trials", "16", "--no-transfer"]
    assert main([*command, "--measure-caches", "cold"]) == 2
    weights = constant_bytes(relax_module(model))
    assert resolve_measure_caches("auto", model, cache_bytes=weights) == "warm"
    assert resolve_measure_caches("auto", model, cache_bytes=weights - 1) == "cold"
    with pytest.raises(ValueError, match="unknown measure_caches 'hot'"):
        tune_network(
            RunConfig.make(model, tmp_path / "hot", target=target, options=options, measure_caches="hot")
        )
    with pytest.raises(ValueError, match="give a runner timing cold"):
        config = RunConfig.make(
            model, tmp_path / "own", target=target, options=options, measure_caches="cold"
        )
        tune_network(config, measure=Measurement(runner=ms.runner.LocalRunner()))
    assert not (tmp_path / "hot").exists() and not (tmp_path / "own").exists()


@pytest.mark.parametrize(("runs", "warm_calls"), [(0, 3), (5, 0)])
def test_profile_refuses_fewer_than_one_run_or_warm_call(runs, warm_calls):
    calls = []
    with pytest.raises(ValueError, match="at least 1"):
        profile_vm(lambda: calls.append("call"), calls.append, runs=runs, warm_calls=warm_calls)
    assert calls == []  # refused before the network ran or the hook was set


@pytest.mark.parametrize(
    "name",
    [
        "mobilenet_v1_block",
        "efficientnet_mbconv",
        "resnet_bottleneck",
        "resnext_block",
        "bert_mini_layer",
        "bert_small_layer",
        "bert_large_layer",
    ],
)
def test_pretraining_networks_compile_untuned_and_match_pytorch(name, target, tmp_path):
    # The networks collected only as pretraining data or development cases: each imports from PyTorch,
    # extracts tasks and, with no tuned schedule, builds with TVM's default lowering to PyTorch's output.
    compiled = compile_network(RunConfig.make(name, tmp_path, target=target), runtimes=(), rounds=1)
    assert compiled.tuned_tasks[0] == 0
    assert compiled.max_abs_error < 1e-4
    assert compiled.tvm.seconds > 0


def test_cli_tune_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = [
        *("tune", "matmul", "--shape", "32,32,32", "--trials", "8", "--trials-per-iter", "8"),
        *(
            "--population",
            "16",
            "--work-dir",
            str(tmp_path / "wd"),
            "--json",
            str(out),
            "--quiet",
            "--profile",
        ),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "matmul_32x32x32" in printed and "GFLOPS" in printed and "PyTorch reference" in printed
    assert "SendToBuilder" in printed  # the profile breakdown
    saved = json.loads(out.read_text())
    assert saved["trials"] == 8 and saved["best_seconds"] > 0


def test_cli_rejects_bad_input(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "gemm"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'gemm'" in capsys.readouterr().err
    assert main(["tune", "matmul", "--shape", "1,2", "--trials", "1"]) == 2
    assert "takes 3 shape values" in capsys.readouterr().err


def test_cli_target_shows_the_hardware_vector(capsys):
    assert main(["target", "--mcpu", "skylake-avx512", "--num-cores", "4"]) == 0
    printed = capsys.readouterr().out
    assert '"mcpu":"skylake-avx512"' in printed
    assert "num_cores" in printed and "vector_unit_bytes            64" in printed
