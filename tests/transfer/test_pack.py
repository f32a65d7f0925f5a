"""The transfer pack: what it holds, what it refuses, the zero-trial exact match and the target-aware
lookup, on a real tuning run of the mlp network."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from log_helpers import warnings_of
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex
from tvm.s_tir.schedule import ScheduleError

from tenset_tools import command
from tenset_tools.ansor.records import LoadStats
from tenset_tools.command import UsageError
from tenset_tools.metaschedule import RECORD_FILE, iter_database_records, task_id_of_mod
from tenset_tools.schema import SCHEMA_VERSION, read_metadata
from tvm_transfer import cli, transfer
from tvm_transfer.cli import build_parser, main
from tvm_transfer.cli.pack import PACK
from tvm_transfer.cli.transfer import resolve_transfer_pack
from tvm_transfer.cost_model import load_cost_model
from tvm_transfer.search_strategy.base import program_key
from tvm_transfer.search_strategy.unmeasured import record_program_key
from tvm_transfer.target import host_target, target_id
from tvm_transfer.transfer import schedules as schedules_module
from tvm_transfer.transfer.apply import (
    ExactMatches,
    OtherTargetCandidates,
)
from tvm_transfer.transfer.pack import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    SCHEDULES_DIR,
    TransferPack,
    TransferPackError,
    build_pack,
    part_checksums,
)
from tvm_transfer.transfer.policy import DEFAULT_POLICY, TransferPolicy
from tvm_transfer.transfer.schedules import PACKED_WORKLOADS
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import RunConfig, extract_network_tasks
from tvm_transfer.tuning.task_selection import TaskSelection
from tvm_transfer.tuning.workdir import APPLIED_FILE, WorkDir, open_database


@pytest.fixture(scope="module")
def mlp_tasks(target):
    return extract_network_tasks("mlp", target)


def _other_target(target):
    """The host CPU with one core fewer or more: another target id, same machine."""
    cores = int(target.attrs["num-cores"])
    return host_target(num_cores=cores - 1 if cores > 1 else 2)


def _mlp_with_pack(work_dir, pack, target, options, **plan) -> RunConfig:
    """The mlp run in ``work_dir`` applying ``pack``'s exact matches, our XGBoost model learning the rest."""
    plan = TuningPlan(pack_schedules=ExactMatches(pack), **plan)
    return RunConfig.make("mlp", work_dir, target=target, options=options, plan=plan)


def test_the_pack_holds_the_run_with_checksums(pack, tuned_mlp, target, run_options):
    manifest = json.loads((pack.path / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["targets"] == [target_id(target)] and manifest["networks"] == ["mlp"]
    assert manifest["records"]["corpus"] == run_options.trials
    assert set(manifest["parts"]) >= {"corpus.parquet", "models/xgboost.model", "schedules/index.jsonl"}
    assert read_metadata(pack.path / "corpus.parquet")["schema_version"] == SCHEMA_VERSION
    assert len(pack.corpus()) == run_options.trials
    assert type(pack.model()).__name__ == "XGBoostCostModel"
    assert type(load_cost_model(str(pack.path / "models/xgboost.model"))).__name__ == "XGBoostCostModel"
    # Each task's fastest record first, with the latency the run measured.
    _, result = tuned_mlp
    schedules = pack.schedules()
    for name, _, _, best, _ in result.tasks:
        entries = [e for e in schedules.entries if name in e.tasks]
        assert entries and min(entries, key=lambda e: e.rank).seconds == pytest.approx(best)
        assert len(entries) <= 3


def _copy(pack, tmp_path):
    copy = tmp_path / "copy.pack"
    shutil.copytree(pack.path, copy)
    return copy


def test_a_pack_of_another_format_version_is_refused(pack, tmp_path):
    copy = _copy(pack, tmp_path)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    newer = rf"format version {FORMAT_VERSION + 1}.*; upgrade tvm-transfer to read it, or .*tenset-tools pack"
    with pytest.raises(TransferPackError, match=newer):
        TransferPack.open(copy)
    manifest["format_version"] = 1
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(TransferPackError, match=r"format version 1, .*; rebuild it with `tenset-tools pack"):
        TransferPack.open(copy)


def _as_version_2(pack, tmp_path):
    """A copy of ``pack`` in the version-2 layout: the shared workload file copied into each target folder
    (for a one-target pack, exactly what version 2 wrote), the manifest re-checksummed."""
    copy = _copy(pack, tmp_path)
    shared = copy / SCHEDULES_DIR / PACKED_WORKLOADS
    for folder in {e.dir for e in pack.schedules().entries}:
        shutil.copyfile(shared, copy / SCHEDULES_DIR / folder / PACKED_WORKLOADS)
    shared.unlink()
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["format_version"], manifest["parts"] = 2, part_checksums(copy)
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    return copy


def test_a_version_2_pack_is_read_and_extended_into_version_3(pack, tuned_mlp, mlp_tasks, target, tmp_path):
    assert (pack.path / SCHEDULES_DIR / PACKED_WORKLOADS).is_file()  # one workload file for every target
    old = TransferPack.open(_as_version_2(pack, tmp_path))
    assert "(format 2)" in old.describe()
    for task in mlp_tasks:
        mod = task.dispatched[0]
        records = [(r.record_json, r.workload_json) for r in old.schedules().exact(mod, target)]
        assert records and records == [
            (r.record_json, r.workload_json) for r in pack.schedules().exact(mod, target)
        ]
    extended = build_pack([tuned_mlp[0]], tmp_path / "extended.pack", top_k=3, models=(), base=old)
    assert extended.manifest["format_version"] == FORMAT_VERSION == 3
    assert [p for p in extended.manifest["parts"] if p.endswith(PACKED_WORKLOADS)] == [
        f"{SCHEDULES_DIR}/{PACKED_WORKLOADS}"
    ]
    assert extended.schedules().entries == pack.schedules().entries


def test_a_changed_part_is_refused(pack, tmp_path):
    copy = _copy(pack, tmp_path)
    index = copy / "schedules" / "index.jsonl"
    text = index.read_text()
    index.write_text(text.replace('"rank":0', '"rank":1', 1))  # same size, other content
    with pytest.raises(TransferPackError, match=r"part schedules/index.jsonl does not match its checksum"):
        TransferPack.open(copy)


def test_a_model_the_manifest_names_outside_its_checksummed_parts_is_refused(pack, tmp_path):
    copy = _copy(pack, tmp_path)
    shutil.copyfile(copy / "models" / "xgboost.model", copy / "models" / "unlisted.model")
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["models"]["xgboost"] = "models/unlisted.model"
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(TransferPackError, match="is not a verified part"):
        TransferPack.open(copy).model()


def test_a_missing_part_is_refused_and_the_cli_says_what_to_do(pack, tmp_path, capsys):
    copy = _copy(pack, tmp_path)
    (copy / "models" / "xgboost.model").unlink()
    with pytest.raises(TransferPackError, match=r"part models/xgboost.model is missing; rebuild it with"):
        TransferPack.open(copy)
    with pytest.raises(TransferPackError, match=r"not a transfer pack \(no such folder\)"):
        TransferPack.open(tmp_path / "nowhere")
    flags = ["compile", "mlp", "--transfer-pack", str(copy), "--work-dir", str(tmp_path / "w")]
    assert main(flags) == 2
    err = capsys.readouterr().err.strip()
    assert re.match(r"^tvm-transfer compile: error: --transfer-pack: .* is missing; ", err)
    assert len(err.splitlines()) == 1


def test_an_exact_match_network_is_applied_with_zero_trials_and_compiles(
    pack, tuned_mlp, target, tmp_path, run_options
):
    _, source = tuned_mlp
    work_dir = tmp_path / "again"
    result = tune_network(_mlp_with_pack(work_dir, pack, target, run_options))
    assert result.new_trials == 0
    assert sorted(result.from_pack) == sorted(name for name, *_ in source.tasks)
    # Each task's schedule carries the latency the pack measured: the source run's best.
    assert [row[3] for row in result.tasks] == pytest.approx([row[3] for row in source.tasks])
    applied = WorkDir(work_dir).applied_tasks()
    assert {a.target_id for a in applied.values()} == {target_id(target)} and len(applied) == 3
    compiled = compile_network(RunConfig.make("mlp", work_dir, target=target), runtimes=[], rounds=1)
    assert compiled.tuned_tasks == (3, 3) and compiled.max_abs_error < 1e-3
    # Applying again adds nothing: one record per task.
    again = tune_network(_mlp_with_pack(work_dir, pack, target, run_options))
    assert again.new_trials == 0 and len(open_database(work_dir).get_all_tuning_records()) == 3
    # A run tuning a selection of the tasks counts the pack's records as no trials either.
    selected = tune_network(
        _mlp_with_pack(tmp_path / "selected", pack, target, run_options),
        selection=TaskSelection(flops_share=1.0),
    )
    assert selected.status == ["from-pack"] * 3 and [row[4] for row in selected.tasks] == [0, 0, 0]


def test_an_exact_match_is_tuned_on_once_the_run_has_more_trials_per_task_than_the_pack_measured(
    pack, tuned_mlp, mlp_tasks, target, tmp_path, run_options
):
    _, source = tuned_mlp
    # The pack measured each task 4 times (one batch): a run of 12 trials over the 3 tasks gives each as many
    # (the exact-match test above: nothing measured), a run of 24 twice as many.
    tid = target_id(target)
    assert [pack.measurements(task_id_of_mod(t.dispatched[0]), tid) for t in mlp_tasks] == [4, 4, 4]
    options = dataclasses.replace(run_options, trials=24)
    kept = tune_network(_mlp_with_pack(tmp_path / "kept", pack, target, options, refine_from_pack=False))
    assert kept.new_trials == 0 and kept.refined == []
    work_dir = tmp_path / "refined"
    result = tune_network(_mlp_with_pack(work_dir, pack, target, options))
    assert sorted(result.refined) == sorted(result.from_pack) == sorted(name for name, *_ in source.tasks)
    # The pack's records count as no trials. (A batch holding a program measured before, the pack's
    # among them, is measured short, so MetaSchedule may run one more.)
    measured = result.new_trials
    assert 24 <= measured < 24 + 4 and result.rounds[-1]["trials"] == measured
    assert sum(row[4] for row in result.tasks) == measured
    assert len(open_database(work_dir).get_all_tuning_records()) == 3 + measured
    # A task keeps the pack's record unless the run measured a faster one.
    assert all(row[3] <= pack_row[3] for row, pack_row in zip(result.tasks, source.tasks, strict=True))
    assert "3 task(s) applied from the transfer pack with 0 trials, 3 of them tuned on from there" in (
        result.table()
    )
    # Tuned on once, a task stays so: a smaller budget measures nothing more and counts the same trials.
    again = tune_network(_mlp_with_pack(work_dir, pack, target, run_options))
    assert again.new_trials == 0 and sorted(again.refined) == sorted(result.refined)
    assert [row[4] for row in again.tasks] == [row[4] for row in result.tasks]


def test_compile_applies_a_pack_to_a_fresh_work_dir_with_zero_trials_and_its_first_tuning_says_the_timing(
    pack, target, tmp_path, run_options
):
    compiled = compile_network(
        RunConfig.make("mlp", tmp_path / "fresh", target=target, plan=TransferPolicy.build_plan(pack)),
        runtimes=[],
        rounds=1,
    )
    assert compiled.tuned_tasks == (3, 3) and compiled.max_abs_error < 1e-3
    assert len(WorkDir(tmp_path / "fresh").applied_tasks()) == 3
    # The pack's records are not the work dir's measurements: the first tuning run says how it is timed.
    options = dataclasses.replace(run_options, trials=24)
    tuned = tune_network(
        RunConfig.make(
            "mlp",
            tmp_path / "fresh",
            target=target,
            options=options,
            measure_caches="cold",
            plan=TuningPlan(pack_schedules=ExactMatches(pack)),
        )
    )
    assert tuned.new_trials > 0 and WorkDir(tmp_path / "fresh").settings().measure_caches == "cold"
    # Left unsaid, the timing is the work dir's; said otherwise, it is refused.
    assert _mlp_with_pack(tmp_path / "fresh", pack, target, options).measure_caches == "cold"
    with pytest.raises(ValueError, match="timed cold, and records timed warm would not compare"):
        tune_network(RunConfig.make("mlp", tmp_path / "fresh", target=target, measure_caches="warm"))


def test_records_of_another_target_are_candidates_never_final(pack, mlp_tasks, target, tmp_path):
    other = _other_target(target)
    assert target_id(other) != target_id(target)
    schedules = pack.schedules()
    for task in mlp_tasks:
        mod = task.dispatched[0]
        assert schedules.exact(mod, other) == []
        candidates = schedules.other_targets(mod, other)
        assert candidates and {r.entry.target_id for r in candidates} == {target_id(target)}
        assert {r.relation for r in candidates} == {"other-target"}
        assert len(schedules.exact(mod, target)) >= 1 and schedules.other_targets(mod, target) == []
    work_dir = tmp_path / "other"
    pairs = [(task.task_name, task.dispatched[0]) for task in mlp_tasks]
    assert ExactMatches(pack).apply(pairs, other, work_dir) == {}
    assert not (work_dir / APPLIED_FILE).exists()
    records = work_dir / RECORD_FILE
    assert not records.exists() or records.read_text() == ""


def test_a_work_dir_tuned_for_one_target_is_refused_for_another_before_anything_runs(
    tuned_mlp, target, run_options, tmp_path, capsys
):
    work_dir = tmp_path / "mlp"
    shutil.copytree(tuned_mlp[0], work_dir)
    before = (work_dir / RECORD_FILE).read_bytes()
    other = _other_target(target)
    refused = f"holds records measured for {target_id(target)}, which a run for {target_id(other)} would"
    with pytest.raises(ValueError, match=re.escape(refused)):
        tune_network(RunConfig.make("mlp", work_dir, target=other, options=run_options))
    with pytest.raises(ValueError, match=re.escape(refused)):
        compile_network(RunConfig.make("mlp", work_dir, target=other), runtimes=[], rounds=1)
    cores = str(other.attrs["num-cores"])
    assert main(["compile", "mlp", "--work-dir", str(work_dir), "--num-cores", cores, "--no-transfer"]) == 2
    assert refused in capsys.readouterr().err
    assert (work_dir / RECORD_FILE).read_bytes() == before


def test_runs_with_and_without_a_pack_default_to_different_work_dirs(pack):
    def work_dir(*flags: str) -> str:
        args = build_parser().parse_args(["tune-network", "mlp", *flags])
        return cli._default_work_dir(args, resolve_transfer_pack(args), "mlp").name

    with_pack = ["--transfer-pack", str(pack.path)]
    assert work_dir(*with_pack) == "mlp-transfer" and work_dir("--no-transfer") == "mlp-tvm-xgb"
    assert work_dir(*with_pack, "--cost-model", "lightgbm") == "mlp-lightgbm-transfer"
    assert work_dir("--no-transfer", "--cost-model", "lightgbm") == "mlp-lightgbm"


def _context(mod, target) -> ms.TuneContext:
    return ms.TuneContext(mod, target=target, space_generator="post-order-apply", task_name="task")


def _measured(work_dir, context) -> list[int]:
    """The programs ``work_dir`` measured of ``context``'s task, in measurement order (the record file's),
    each as the context's search makes it of the record."""
    key = tvm_ffi.structural_hash(context.mod)
    records = iter_database_records(work_dir, LoadStats())
    traces = [r.trace for _, r, _, _ in records if tvm_ffi.structural_hash(r.workload.mod) == key]
    return [record_program_key(trace, context) for trace in traces]


def test_a_run_on_another_target_measures_the_packs_records_of_its_tasks_first(
    pack, mlp_tasks, target, run_options, tmp_path
):
    other, work_dir = _other_target(target), tmp_path / "other"

    def tune(trials: int):
        options = dataclasses.replace(run_options, trials=trials)
        return tune_network(
            RunConfig.make(
                "mlp",
                work_dir,
                target=other,
                options=options,
                plan=TuningPlan(
                    cost_model=DEFAULT_POLICY.cost_model(pack),
                    search_strategy=DEFAULT_POLICY.search_strategy(pack, options),
                    pack_schedules=ExactMatches(pack),
                ),
            )
        )

    result = tune(12)
    assert result.from_pack == [] and result.new_trials >= 12  # nothing measured elsewhere is final
    schedules = pack.schedules()
    for task in mlp_tasks:
        context = _context(task.dispatched[0], other)
        known = {program_key(c.sch) for c in OtherTargetCandidates(pack)(context)}
        # The pack's top 3 of the task, measured on `target`, post-processed for `other`.
        assert len(known) == len(schedules.other_targets(context.mod, other)) == 3
        # The task's first batch is exactly those programs, measured here.
        measured = _measured(work_dir, context)
        assert set(measured[: len(known)]) == known
    # Resumed, the run measures new programs, never those again.
    assert tune(18).new_trials > 0
    for task in mlp_tasks:
        measured = _measured(work_dir, _context(task.dispatched[0], other))
        assert len(measured) == len(set(measured))


def test_other_target_records_that_do_not_replay_are_skipped_with_one_warning_per_task(
    pack, mlp_tasks, target, monkeypatch
):
    from tvm_transfer.transfer import apply as apply_module

    def rejected(trace, mod, context):
        raise ValueError("a MetaSchedule post-processor rejected the replayed schedule")

    monkeypatch.setattr(apply_module, "replay_trace", rejected)
    context = _context(mlp_tasks[0].dispatched[0], _other_target(target))
    with warnings_of(apply_module.__name__) as messages:
        assert OtherTargetCandidates(pack)(context) == []
    (message,) = messages
    assert message == (
        "task: 3 of the pack's 3 records from other targets skipped: a MetaSchedule post-processor "
        f"rejected the replayed schedule (3 of {target_id(target)})"
    )


def test_similar_tasks_are_found_by_kind_and_structure(pack, mlp_tasks, target):
    schedules = pack.schedules()
    by_name = {t.task_name: t.dispatched[0] for t in mlp_tasks}
    # The two matmul + bias + relu layers share their block structure; the last layer has no relu.
    similar = schedules.similar(by_name["fused_matmul_add_relu1"], target)
    assert similar and {r.relation for r in similar} == {"similar"}
    assert {t for r in similar for t in r.entry.tasks} == {"fused_matmul1_add1_relu11"}
    assert schedules.similar(by_name["fused_matmul2_add21"], target) == []


def test_tenset_tools_pack_builds_and_replaces_a_pack(tuned_mlp, tmp_path, capsys):
    work_dir, _ = tuned_mlp
    parser = command.build_parser("tenset-tools", None, [PACK])
    out = tmp_path / "mine.pack"
    assert (
        command.run(parser, ["pack", str(work_dir), "-o", str(out), "--model", "none", "--top-k", "1"]) == 0
    )
    first = TransferPack.open(out)
    assert first.model_names == [] and first.manifest["records"]["schedules"] == 3
    assert "| workloads | 3 |" in capsys.readouterr().out
    assert command.run(parser, ["pack", str(work_dir), "-o", str(out), "--model", "none"]) == 0
    assert TransferPack.open(out).manifest["records"]["schedules"] > 3
    before = TransferPack.open(out).manifest
    extend = ["pack", str(work_dir), "-o", str(out), "--model", "none", "--extend", str(out)]
    assert command.run(parser, extend) == 0  # the same run added to its own pack counts once
    after = TransferPack.open(out).manifest
    assert after["records"] == before["records"] and after["sources"] == before["sources"]
    assert f"| extends | {before['created']} |" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.pack"]  # no temporary left behind
    (tmp_path / "plain").mkdir()
    errors = (OSError, ValueError)
    assert command.run(parser, ["pack", str(work_dir), "-o", str(tmp_path / "plain")], errors=errors) == 1
    assert "is not a transfer pack; choose another -o" in capsys.readouterr().err
    assert command.run(parser, ["pack", "-o", str(tmp_path / "nothing.pack")]) == 2  # nothing to pack
    assert "give WORK_DIR... to pack, or --extend BASE_PACK" in capsys.readouterr().err
    # Models that cannot go into a pack are refused before anything is packed.
    assert command.run(parser, ["pack", str(work_dir), "-o", str(tmp_path / "x"), "--model", "tvm-xgb"]) == 2
    assert "neither a cost model that trains on a dataset" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "xgboost.model").touch()
    twice = ["--model", "xgboost", "--model", str(tmp_path / "mine" / "xgboost.model")]
    assert command.run(parser, ["pack", str(work_dir), "-o", str(tmp_path / "x"), *twice]) == 2
    assert "more than one model named xgboost" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    # The library refuses them before any work too.
    with pytest.raises(ValueError, match="more than one model named xgboost"):
        build_pack([work_dir], tmp_path / "y", model_files=[tmp_path / "mine" / "xgboost.model"])
    assert not (tmp_path / "y").exists()


def test_without_an_installed_pack_runs_go_without_transfer_in_one_info_line(pack, monkeypatch, tmp_path):
    monkeypatch.setattr(transfer, "DEFAULT_PACK", tmp_path / "not-installed")
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("tvm_transfer.cli.transfer")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        args = build_parser().parse_args(["tune-network", "mlp"])
        assert resolve_transfer_pack(args) is None
        assert len(lines) == 1 and "no transfer pack is installed" in lines[0]
        args = build_parser().parse_args(["tune", "matmul", "--transfer-pack", str(pack.path)])
        assert resolve_transfer_pack(args).path == pack.path
        assert resolve_transfer_pack(build_parser().parse_args(["compile", "mlp", "--no-transfer"])) is None
        both = ["compile", "mlp", "--no-transfer", "--transfer-pack", str(pack.path)]
        with pytest.raises(UsageError, match="exclude each other"):
            resolve_transfer_pack(build_parser().parse_args(both))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def test_the_operator_command_applies_a_packed_operator_then_tunes_on_given_more_trials(
    target, tmp_path, capsys
):
    # A pack of one tuned operator: `tune` measured it 4 times on this target, then `tune` from the pack.
    source = tmp_path / "mm"
    flags = ["tune", "matmul", "--shape", "32,32,32", "--trials-per-iter", "4", "--population", "16"]
    flags += ["--no-reference", "--quiet"]
    assert main([*flags, "--trials", "4", "--no-transfer", "--work-dir", str(source)]) == 0
    packed = build_pack([source], tmp_path / "mm.pack", models=())
    capsys.readouterr()

    def tune_from_pack(trials: int) -> dict:
        report = tmp_path / f"{trials}.json"
        from_pack = ["--transfer-pack", str(packed.path), "--work-dir", str(tmp_path / "w")]
        assert main([*flags, "--trials", str(trials), *from_pack, "--json", str(report)]) == 0
        return json.loads(report.read_text())

    applied = tune_from_pack(4)
    assert applied["new_trials"] == applied["trials"] == 0 and applied["from_pack"] == str(packed.path)
    assert np.isfinite(applied["best_seconds"])
    assert "from transfer pack" in capsys.readouterr().out
    # 8 trials are more than the pack measured: tuning goes on from its record, which counts as no trial
    # (a batch holding the pack's program is measured short, so MetaSchedule may run one more).
    tuned_on = tune_from_pack(8)
    assert tuned_on["new_trials"] == tuned_on["trials"] and 8 <= tuned_on["trials"] < 12
    assert tuned_on["from_pack"] == str(packed.path)
    assert tuned_on["best_seconds"] <= applied["best_seconds"]
    assert "tuned on from the record of transfer pack" in capsys.readouterr().out
    # Tuning on in that work dir without the pack would start from the pack's record: not TVM alone.
    assert main([*flags, "--trials", "12", "--no-transfer", "--work-dir", str(tmp_path / "w")]) == 2
    assert "holds 1 schedule(s) applied from a transfer pack" in capsys.readouterr().err


def test_networks_held_out_are_left_out_of_a_pack_and_listed(tuned_mlp, tmp_path):
    work_dir, _ = tuned_mlp
    with pytest.raises(ValueError, match="is of an excluded network"):
        build_pack([work_dir], tmp_path / "none.pack", models=(), exclude_networks=["mlp"])
    with pytest.raises(ValueError, match="is of an excluded network"):  # at any shape or layout
        build_pack([work_dir], tmp_path / "none.pack", models=(), exclude_networks=["mlp@1,64@nhwc"])
    kept = build_pack([work_dir], tmp_path / "kept.pack", models=(), exclude_networks=["bert_base"])
    assert kept.manifest["excluded_networks"] == ["bert_base"] and kept.manifest["networks"] == ["mlp"]


def test_a_pack_extends_another_and_counts_a_run_once(tuned_mlp, tmp_path):
    work_dir, _ = tuned_mlp
    # The base holds one task of the run: a copy of the work dir keeping only that task's records.
    partial = tmp_path / "partial"
    shutil.copytree(work_dir, partial)
    lines = (partial / RECORD_FILE).read_text().splitlines()
    first = [line for line in lines if json.loads(line)[0] == json.loads(lines[0])[0]]
    (partial / RECORD_FILE).write_text("".join(line + "\n" for line in first))
    base = build_pack([partial], tmp_path / "base.pack", models=(), exclude_networks=["bert_base"])
    assert base.schedules().workload_count == 1 and base.manifest["records"]["corpus"] == len(first)

    extended = build_pack([work_dir], tmp_path / "extended.pack", top_k=3, base=base)
    copy = tmp_path / "copy"  # the same measurements in a second work dir count once in a fresh pack too
    shutil.copytree(work_dir, copy)
    full = build_pack([work_dir, copy], tmp_path / "full.pack", top_k=3, models=())
    assert full.manifest["records"]["corpus"] == len(lines)
    # The base's records are measured candidates of the run: they count once, so the extension holds the
    # run exactly as a pack built from it alone, plus what the base says about itself.
    assert extended.manifest["records"] == full.manifest["records"]
    assert len(extended.corpus()) == len(lines)
    key = [(e.workload, e.target_id, e.rank, e.seconds) for e in extended.schedules().entries]
    assert key == [(e.workload, e.target_id, e.rank, e.seconds) for e in full.schedules().entries]
    facts = {key: base.manifest[key] for key in ("created", "package_commit")}
    assert extended.manifest["extends"] == facts
    assert extended.manifest["excluded_networks"] == ["bert_base"]
    assert extended.model_names == ["xgboost"] and len(extended.manifest["sources"]) == 2
    # Every kept record, the base's among them, still replays on its workload.
    assert len(extended.schedules().source_records()) == len(extended.schedules().entries)
    with pytest.raises(ValueError, match="holds mlp: an extension of it cannot leave them out"):
        build_pack([work_dir], tmp_path / "x.pack", models=(), exclude_networks=["mlp"], base=full)
    # An extension keeps as many records per task as its base unless told fewer: the base's records
    # beyond its top_k are gone, so more would deepen only the tasks of the work dirs given again.
    assert base.manifest["top_k"] == 5 and extended.manifest["top_k"] == 3
    again = build_pack([partial], tmp_path / "again.pack", models=(), base=extended)
    assert again.manifest["top_k"] == 3 and again.schedules().entries == extended.schedules().entries
    with pytest.raises(
        ValueError, match=r"keeps 3 records per task and target: an extension of it cannot keep 4"
    ):
        build_pack([work_dir], tmp_path / "x.pack", top_k=4, models=(), base=extended)
    # Without work dirs an extension changes only the models: the same corpus and schedules, and a model
    # file given is packed byte for byte.
    model_file = extended.path / extended.manifest["models"]["xgboost"]
    repacked = build_pack([], tmp_path / "repacked.pack", model_files=[model_file], models=(), base=extended)
    assert repacked.manifest["records"] == extended.manifest["records"]
    assert repacked.schedules().entries == extended.schedules().entries
    assert (repacked.path / repacked.manifest["models"]["xgboost"]).read_bytes() == model_file.read_bytes()
    with pytest.raises(ValueError, match="no work dirs and no base pack"):
        build_pack([], tmp_path / "x.pack", models=())


def test_an_exact_match_replays_on_a_task_whose_blocks_have_other_names(pack, mlp_tasks, target, tmp_path):
    # Relax names a fused task's blocks after its variables: one workload, other names in another network.
    mod = mlp_tasks[0].dispatched[0]
    other = tvm.script.from_source(re.sub(r'T\.sblock\("(\w+)"\)', r'T.sblock("other_\1")', mod.script()))
    assert shash2hex(other) == shash2hex(mod) and "other_matmul" in other.script()
    record = pack.schedules().exact(other, target)[0]
    with pytest.raises(ScheduleError):  # the trace as measured looks up the source's names
        ms.database.TuningRecord.from_json(list(record.record_json), ms.database.Workload(other))
    applied = ExactMatches(pack).apply([("other", other)], target, tmp_path)
    assert list(applied) == [0] and applied[0].seconds == record.seconds
    database = open_database(tmp_path)
    schedule = database.query_schedule(other, target, "main")
    assert schedule is not None and "other_matmul" in schedule.mod.script()
    # On another structure nothing is renamed, and the error gives TVM's description.
    with pytest.raises(ValueError, match=r"the pack's trace does not replay \((?!not rendered)"):
        record.tuning_record(ms.database.Workload(mlp_tasks[1].dispatched[0]))


def _sum_rows(data: str, total: str, out: str) -> tvm.IRModule:
    """A row sum and a scaling (blocks named ``total`` and ``out``) of an 8x16 argument named ``data``."""
    x = te.placeholder((8, 16), name=data)
    k = te.reduce_axis((0, 16), name="k")
    summed = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name=total)
    scaled = te.compute((8,), lambda i: summed[i] * 0.5, name=out)
    return tvm.IRModule({"main": te.create_prim_func([x, scaled])})


def test_a_trace_is_renamed_by_the_names_each_module_declares():
    lookups = [("GetSBlock", (), (name, "main"), (f"b{i}",)) for i, name in enumerate(
        ["A_red", "A_red_rf", "A_red_rf_update", "T_scale", "root"]
    )]  # fmt: skip
    record_json = ((lookups, ()), ("1e-05",))
    source = _sum_rows("A", "A_red", "T_scale")

    def renamed(mod):
        json_ = schedules_module._renamed_blocks(record_json, schedules_module._block_renaming(source, mod))
        return [attrs[0] for _kind, _inputs, attrs, _outputs in json_[0][0]]

    # Declared names, and those a step derived from them, follow the module's names.
    assert renamed(_sum_rows("B", "B_red", "T_half")) == [
        "B_red",
        "B_red_rf",
        "B_red_rf_update",
        "T_half",
        "root",
    ]
    # A name both modules declare is kept, though a renamed name (the argument) is a prefix of it.
    assert renamed(_sum_rows("X", "A_red", "T_scale")) == [name for _k, _i, (name, _f), _o in lookups]
    # Nothing is paired with a module of another structure.
    other = tvm.IRModule({"main": te.create_prim_func([te.placeholder((8,), name="A")])})
    assert schedules_module._block_renaming(source, other) == {}
