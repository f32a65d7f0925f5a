"""The transfer policy: which cost model and search a run gets with and without a pack, and that the
pack's schedules seed the search of a task the pack never saw, on the real mlp run of the conftest."""

from __future__ import annotations

import pytest

from tvm_transfer.cli import _cost_model, build_parser
from tvm_transfer.cli.transfer import transfer_search
from tvm_transfer.networks import load_model
from tvm_transfer.search_strategy.copula import CopulaSearch
from tvm_transfer.search_strategy.copula.population import design_spaces
from tvm_transfer.search_strategy.measure_first import MeasureFirst
from tvm_transfer.transfer.apply import OtherTargetCandidates
from tvm_transfer.transfer.pack import TransferPackError
from tvm_transfer.transfer.policy import DEFAULT_POLICY, TransferPolicy
from tvm_transfer.tuning.network import extract_network_tasks
from tvm_transfer.tuning.session import TuneOptions


def _args(*argv: str):
    return build_parser().parse_args(["tune-network", "mlp", *argv])


def test_with_a_pack_the_cli_tunes_under_its_model_guarded_and_without_as_tvm_does(pack):
    with_pack = _args("--transfer-pack", str(pack.path))
    guarded = _cost_model(with_pack)
    assert type(guarded).__name__ == "GuardedCostModel"
    assert type(guarded.pretrained).__name__ == "XGBoostCostModel"
    assert type(guarded.online_).__name__ == "XGBoostCostModel"  # the default online model
    # Chosen on development networks and operators (docs/transfer_pack.md): the pack's model, fine-tuned on
    # the run on top of its own trees, which the guard lets learn from every batch, and its seeds.
    assert DEFAULT_POLICY.name == "tuned-model+seeds"
    prior_rounds = pack.model().get_params()["num_rounds"]
    assert guarded.pretrained.prior_rounds == prior_rounds and guarded.adapt_pretrained
    # Both models predict a task's normalised throughput: their scores blend linearly, call-independent.
    assert guarded.blend == "linear" and DEFAULT_POLICY.blend == "linear"
    # The first batch is the pack's seeds in the model's order, later batches evolve from the measured bests
    # only; all after the pack's records of a task's workload measured on other targets, when it has any.
    search = transfer_search(with_pack, TuneOptions(trials_per_iter=8))
    assert isinstance(search, MeasureFirst) and isinstance(search.inner, CopulaSearch)
    assert search.inner.rank_pool == 8 and not search.inner.keep_seeds and search.inner.siblings == 0
    assert isinstance(search.provider, OtherTargetCandidates) and search.provider.pack.path == pack.path
    # --no-transfer is TVM's own default: MetaSchedule's XGBModel under evolutionary search.
    assert _cost_model(_args("--no-transfer")) == "tvm-xgb"
    assert transfer_search(_args("--no-transfer"), TuneOptions()) is None
    assert _cost_model(_args("--no-transfer", "--cost-model", "lightgbm")) == "lightgbm"
    online = _cost_model(_args("--transfer-pack", str(pack.path), "--cost-model", "tvm-xgb"))
    assert type(online.online_).__name__ == "XGBModel"


def test_a_networks_run_shares_its_budget_as_the_policy_says_with_a_pack_and_as_tvm_does_without(pack):
    policy = TransferPolicy(task_scheduler="weighted-share", first_round_share=1.0, refine_exact=False)
    assert policy.network_tuning(pack) == {
        "transfer_pack": pack,
        "refine_from_pack": False,
        "tasks_by_work": True,
        "task_scheduler": "weighted-share",
        "first_round_share": 1.0,
    }
    assert policy.network_tuning(None) == {
        "transfer_pack": None,
        "refine_from_pack": False,
        "tasks_by_work": False,
        "task_scheduler": "gradient",
        "first_round_share": None,
    }
    assert DEFAULT_POLICY.network_tuning(pack)["refine_from_pack"]  # exact matches tuned on by default


def test_a_policy_uses_only_the_parts_it_names(pack):
    options = TuneOptions(trials_per_iter=4)
    model_only = TransferPolicy(seed_search=False, measure_other_targets=False)
    assert model_only.name == "model" and model_only.search_strategy(pack, options) is None
    as_packed = model_only.cost_model(pack)
    assert as_packed.pretrained.prior_rounds == 0 and not as_packed.adapt_pretrained
    assert as_packed.selection_power is None
    sharp_linear = TransferPolicy(selection_power=4.0, blend="linear").cost_model(pack)
    assert sharp_linear.selection_power == 4.0 and sharp_linear.blend == "linear"
    seeds_only = TransferPolicy(pretrained_model=False, measure_other_targets=False)
    assert seeds_only.name == "seeds" and seeds_only.cost_model(pack) == "xgboost"
    assert seeds_only.search_strategy(pack, options).rank_pool == 0  # no model to rank the seeds
    both = TransferPolicy()
    assert both.name == "model+seeds" and both.search_strategy(pack, options).inner.rank_pool == 4
    assert TransferPolicy(False, False).name == "none" and DEFAULT_POLICY.cost_model(None) == "tvm-xgb"
    # A policy may name which of the pack's models ranks; a name the pack does not hold is refused.
    assert (
        type(TransferPolicy(model_name="xgboost").cost_model(pack).pretrained).__name__ == "XGBoostCostModel"
    )
    with pytest.raises(TransferPackError, match=r"no model 'xgboost-rank'; the pack has \['xgboost'\]"):
        TransferPolicy(model_name="xgboost-rank").cost_model(pack)


def test_a_policy_sets_its_own_population_and_measured_seeds(pack):
    options = TuneOptions(trials_per_iter=4, population_size=32)
    wide = TransferPolicy(seed_search=False, population_size=64)
    assert wide.search_strategy(pack, options).inner.population_size == 64
    assert wide.search_strategy(pack, options).inner.init_min_unmeasured == 32
    assert wide.search_strategy(None, options) is None

    def seeded(**parts) -> CopulaSearch:
        return TransferPolicy(population_size=64, **parts).search_strategy(pack, options).inner

    assert seeded(measured_seeds=1).num_seeds == 1 and seeded(measured_seeds=1).rank_pool == 4
    assert seeded(measured_seeds=1).evo_kwargs["population_size"] == 64
    assert seeded().keep_seeds and not seeded(keep_seeds=False).keep_seeds
    # ``tune_tir`` tunes a clone (made by the Python object the wrapper holds).
    assert seeded(sibling_seeds=2).siblings == 2 and seeded(sibling_seeds=2)._inst.clone().siblings == 2
    assert seeded().sampler is seeded(keep_seeds=False).sampler  # fitted once per opened pack
    assert seeded().num_seeds is None  # one batch of seeds


def test_the_packs_schedules_seed_a_task_of_a_shape_it_never_saw(pack, target):
    # The mlp at batch 4: no workload of the pack (batch 1) matches exactly.
    tasks = extract_network_tasks(load_model("mlp", (4, 784)), target)
    schedules = pack.schedules()
    assert all(not schedules.exact(t.dispatched[0], target) for t in tasks)
    search = TransferPolicy(seed_search=True).search_strategy(pack, TuneOptions(trials_per_iter=4)).inner
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
