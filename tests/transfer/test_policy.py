"""The transfer policy: which cost model and search a run gets with and without a pack, and that the
pack's schedules seed the search of a task the pack never saw, on the real mlp run of the conftest."""

from __future__ import annotations

from tvm_transfer.cli import _options, build_parser
from tvm_transfer.cli import _plan as _plan_of
from tvm_transfer.cli.transfer import resolve_transfer_pack
from tvm_transfer.networks import load_model
from tvm_transfer.search_strategy.copula import CopulaSearch
from tvm_transfer.search_strategy.copula.population import design_spaces
from tvm_transfer.search_strategy.measure_first import MeasureFirst
from tvm_transfer.transfer.apply import OtherTargetCandidates
from tvm_transfer.transfer.policy import DEFAULT_POLICY, TransferPolicy
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.session import TuneOptions


def _plan(*argv: str):
    """The tuning plan ``tune-network mlp ARGV`` makes, as the command line makes it."""
    args = build_parser().parse_args(["tune-network", "mlp", *argv])
    return _plan_of(args, resolve_transfer_pack(args), _options(args))


def test_with_a_pack_the_cli_tunes_under_its_model_guarded_and_without_as_tvm_does(pack):
    plan = _plan("--transfer-pack", str(pack.path), "--trials-per-iter", "8")
    guarded = plan.cost_model
    assert type(guarded).__name__ == "GuardedCostModel"
    assert type(guarded.pretrained).__name__ == "XGBoostCostModel"
    assert type(guarded.online_).__name__ == "XGBoostCostModel"  # the default online model
    # Chosen on development networks and operators (docs/transfer_pack.md): the pack's model, fine-tuned on
    # the run on top of its own trees, which the guard lets learn from every batch, and its seeds.
    assert TransferPolicy() == DEFAULT_POLICY and DEFAULT_POLICY.name == "tuned-model+seeds"
    prior_rounds = pack.model().get_params()["num_rounds"]
    assert guarded.pretrained.prior_rounds == prior_rounds and guarded.adapt_pretrained
    # Both models predict a task's normalised throughput: their scores blend linearly, call-independent.
    assert guarded.blend == "linear" and DEFAULT_POLICY.blend == "linear"
    # The first batch is the pack's seeds in the model's order, later batches evolve from the measured bests
    # only; all after the pack's records of a task's workload measured on other targets, when it has any.
    search = plan.search_strategy
    assert isinstance(search, MeasureFirst) and isinstance(search.inner, CopulaSearch)
    assert search.inner.rank_pool == 8 and not search.inner.keep_seeds
    assert isinstance(search.provider, OtherTargetCandidates) and search.provider.pack.path == pack.path
    # Its exact matches are applied, tuned on when the run gives a task more than the pack measured, and a
    # network's tasks get their first batch heaviest first.
    assert plan.pack_schedules.pack.path == pack.path and plan.refine_from_pack and plan.tasks_by_work
    # --no-transfer is TVM's own default: MetaSchedule's XGBModel under evolutionary search, extraction order.
    assert _plan("--no-transfer") == TuningPlan(cost_model="tvm-xgb")
    assert _plan("--no-transfer", "--cost-model", "lightgbm").cost_model == "lightgbm"
    online = _plan("--transfer-pack", str(pack.path), "--cost-model", "tvm-xgb").cost_model
    assert type(online.online_).__name__ == "XGBModel"


def test_a_plan_takes_the_policys_choices_and_a_build_only_the_exact_matches(pack):
    options = TuneOptions(trials_per_iter=4)
    plan = TransferPolicy(refine_exact=False, tasks_by_work=False).plan(pack, options)
    assert not plan.refine_from_pack and not plan.tasks_by_work and plan.pack_schedules is not None
    assert DEFAULT_POLICY.plan(None, options) == TuningPlan(cost_model="tvm-xgb")
    build = DEFAULT_POLICY.build_plan(pack)
    assert build.pack_schedules.pack is pack and build.search_strategy is None
    assert DEFAULT_POLICY.build_plan(None) == TuningPlan()


def test_a_policy_uses_only_the_parts_it_names(pack):
    options = TuneOptions(trials_per_iter=4)
    model_only = TransferPolicy(seed_search=False, measure_other_targets=False, fine_tune=False, blend="rank")
    assert model_only.name == "model" and model_only.search_strategy(pack, options) is None
    as_packed = model_only.cost_model(pack)
    assert as_packed.pretrained.prior_rounds == 0 and not as_packed.adapt_pretrained
    assert as_packed.blend == "rank"
    seeds_only = TransferPolicy(pretrained_model=False, measure_other_targets=False)
    assert seeds_only.name == "seeds" and seeds_only.cost_model(pack) == "xgboost"
    assert seeds_only.search_strategy(pack, options).rank_pool == 0  # no model to rank the seeds
    both = TransferPolicy(fine_tune=False)
    assert both.name == "model+seeds" and both.search_strategy(pack, options).inner.rank_pool == 4
    assert TransferPolicy(False, False).name == "none" and DEFAULT_POLICY.cost_model(None) == "tvm-xgb"


def test_a_policys_seeded_search_keeps_the_runs_population(pack):
    options = TuneOptions(trials_per_iter=4, population_size=32)

    def seeded(**parts) -> CopulaSearch:
        return TransferPolicy(measure_other_targets=False, **parts).search_strategy(pack, options)

    assert seeded().evo_kwargs["population_size"] == 32 and seeded().inner.init_min_unmeasured == 16
    assert seeded(keep_seeds=True).keep_seeds and not seeded().keep_seeds
    # ``tune_tir`` tunes a clone (made by the Python object the wrapper holds).
    assert seeded(keep_seeds=True)._inst.clone().keep_seeds
    assert seeded().sampler is seeded(keep_seeds=True).sampler  # fitted once per opened pack
    assert seeded().num_seeds is None  # one batch of seeds


def test_the_packs_schedules_seed_a_task_of_a_shape_it_never_saw(pack, target):
    # The mlp at batch 4: no workload of the pack (batch 1) matches exactly.
    tasks = extract_network_tasks(load_model("mlp", (4, 784)), target)
    schedules = pack.schedules()
    assert all(not schedules.exact(t.dispatched[0], target) for t in tasks)
    search = TransferPolicy(keep_seeds=True).search_strategy(pack, TuneOptions(trials_per_iter=4)).inner
    assert isinstance(search, CopulaSearch)
    seeded = set()
    for task in tasks:
        mod, spaces, postprocs = design_spaces(task.dispatched[0], target)
        proposals = search.sampler.propose(mod, target, spaces, postprocs, count=4)
        assert all(p.schedule.mod is not None for p in proposals)
        # A task is seeded whenever one of its design spaces was measured in the pack. The 10-wide output
        # layer has only some of its batch-1 design spaces at batch 4, and which ones the 12-trial source
        # run measured varies with its timing; the hidden layers' spaces are the same at both batches.
        assert bool(proposals) == bool(search.sampler.encodings(mod, spaces, postprocs))
        if proposals:
            seeded.add(task.task_name)
    hidden_layers = {t.task_name for t in tasks if "relu" in t.task_name}
    assert len(hidden_layers) == 2 and hidden_layers <= seeded
