"""ML2Tuner warm-started from earlier runs of other layers (transfer across layers): a real vta_ext run,
bad priors, logs as priors, resuming a warm-started run, the CLI option."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tvm_transfer.cli import main as cli_main
from tvm_transfer.common.estimators import FeatureShapeError, PerformanceModel
from tvm_transfer.vta.ml2tuner import (
    WARM_START_OPTIONS,
    PriorError,
    TransferPrior,
    TunerInputError,
    VtaMeasurer,
    load_log,
    make_tuner,
    read_log,
)
from tvm_transfer.vta.ml2tuner.runs import workload_spec
from vta_ext import RESNET18, preset

HW = preset("default")
EARLY = 16  # profiles: the first round of a cold run is 16 random configurations that compile
WARM = WARM_START_OPTIONS  # the benchmark's warm-start settings (chosen on development seeds)


@pytest.fixture(scope="module")
def prior_runs(tmp_path_factory) -> list:
    """Baseline runs of C10 and C11 (48 profiles each) written as logs: earlier tuning of other layers."""
    folder = tmp_path_factory.mktemp("prior")
    runs = []
    for layer in ("C10", "C11"):
        run = make_tuner("baseline", seed=1).tune(
            VtaMeasurer(RESNET18[layer], HW), 48, log=folder / f"{layer}.jsonl"
        )
        runs.append(folder / f"{layer}.jsonl")
        assert run.n_invalid_profiles > 0  # the prior must teach validity, not only speed
    return runs


@pytest.fixture(scope="module")
def c9_cache() -> dict:
    return {}


def test_prior_from_logs_pools_rows_with_normalised_throughput(prior_runs):
    prior = TransferPrior.from_runs(prior_runs)
    assert len(prior.sources) == 2 and len(prior) == 96  # 48 distinct profiles per run
    assert np.nanmax(prior.throughput) == pytest.approx(1.0)  # each run normalised by its own best
    for source in range(2):
        assert np.nanmax(prior.throughput[prior.source == source]) == pytest.approx(1.0)
    assert (~prior.valid).sum() == sum(read_log(p).n_invalid_profiles for p in prior_runs)
    # Two different layers: the workload columns of the visible features differ between the sources.
    assert not np.array_equal(
        prior.visible[prior.source == 0][0, :12], prior.visible[prior.source == 1][0, :12]
    )


def test_warm_start_profiles_fewer_invalid_and_finds_a_better_best_early(prior_runs, c9_cache):
    """C9 (73% invalid) with the same seed, cold vs warm-started from C10 + C11: the warm run wastes no
    more profiles, far fewer of its first compiles, has the better best after 16 profiles and does not end
    worse."""
    cold = make_tuner("ml2tuner", seed=0).tune(VtaMeasurer(RESNET18["C9"], HW, c9_cache), 32)
    warm = make_tuner("ml2tuner", seed=0, prior=prior_runs, **WARM).tune(
        VtaMeasurer(RESNET18["C9"], HW, c9_cache), 32
    )
    cold_early, warm_early = cold.latencies[:EARLY], warm.latencies[:EARLY]
    assert np.isnan(warm_early).sum() <= np.isnan(cold_early).sum()
    assert warm.n_invalid_profiles <= cold.n_invalid_profiles

    def first_round_compile_failure_share(run) -> float:
        compiles = [e for e in run.events if e.kind == "compile" and e.round == 0]
        return sum(not e.valid for e in compiles) / len(compiles)

    # Cold, round 0 compiles random configurations (C9: most fail); warm, V learnt validity from C10/C11.
    assert first_round_compile_failure_share(warm) < 0.6 * first_round_compile_failure_share(cold)
    assert np.nanmin(warm_early) < np.nanmin(cold_early), (np.nanmin(warm_early), np.nanmin(cold_early))
    assert warm.best_latency <= cold.best_latency
    # Small first rounds: 4 profiles each until 16 are made, then the regular batch of 16.
    rounds = [e.round for e in warm.profiles]
    assert [rounds.count(r) for r in range(5)] == [4, 4, 4, 4, 16]


def test_bad_priors_raise_prior_error(tmp_path, prior_runs):
    with pytest.raises(PriorError, match="no prior runs"):
        make_tuner("ml2tuner", prior=[])
    with pytest.raises(PriorError, match="TuneRun or an ml2tuner-log"):
        make_tuner("ml2tuner", prior=[42])
    (tmp_path / "junk.jsonl").write_text("this is not json\n")
    with pytest.raises(PriorError, match=r"junk\.jsonl"):
        TransferPrior.from_runs([tmp_path / "junk.jsonl"])
    # A log written before logs recorded the workload and hardware cannot describe its rows.
    lines = prior_runs[0].read_text().splitlines()
    header = json.loads(lines[0])
    del header["workload_spec"], header["hw_spec"]
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(PriorError, match="does not record its workload and hardware"):
        TransferPrior.from_runs([tmp_path / "old.jsonl"])
    assert issubclass(PriorError, TunerInputError)  # callers catching tuner input errors catch it too
    with pytest.raises(TunerInputError, match="own_weight"):
        make_tuner("ml2tuner", own_weight=0.0)
    with pytest.raises(TunerInputError, match="initial_batch_size"):
        make_tuner("ml2tuner", initial_batch_size=0)
    with pytest.raises(TunerInputError, match="unknown target"):
        make_tuner("ml2tuner", target="gops")
    with pytest.raises(TunerInputError, match="local_search"):
        make_tuner("ml2tuner", local_search=-1)


def test_grouped_ranking_learns_orders_within_groups_only():
    """Two "layers" whose targets differ by an offset the features do not show (as latencies of layers of
    different sizes): a pooled regressor is pulled by the offset, a ranker grouped per layer is not."""
    rng = np.random.default_rng(0)
    x = rng.random((400, 3)).astype(np.float32)
    group = (np.arange(400) >= 200).astype(int)
    score = x[:, 0] - 0.5 * x[:, 1]  # the order within each group
    y = score + 5.0 * (1 - group)

    def rank_corr(pred: np.ndarray) -> float:
        return min(
            np.corrcoef(np.argsort(np.argsort(pred[group == k])), np.argsort(np.argsort(score[group == k])))[
                0, 1
            ]
            for k in (0, 1)
        )

    ranker = PerformanceModel(objective="rank:pairwise", num_rounds=60).fit(x, y, groups=group)
    regressor = PerformanceModel(num_rounds=60).fit(x, y)
    assert rank_corr(ranker.predict(x)) > 0.85
    assert rank_corr(regressor.predict(x)) < rank_corr(ranker.predict(x)) - 0.2
    with pytest.raises(ValueError, match="groups need a ranking objective"):
        PerformanceModel().fit(x, y, groups=group)
    with pytest.raises(FeatureShapeError, match="constant within each group"):
        PerformanceModel(objective="rank:pairwise").fit(x, y, sample_weight=rng.random(400), groups=group)
    with pytest.raises(FeatureShapeError, match="sample_weight"):
        PerformanceModel().fit(x, y, sample_weight=np.full(400, -1.0))


def test_warm_started_run_logs_and_resumes_without_measuring(prior_runs, c9_cache, tmp_path, monkeypatch):
    log = tmp_path / "warm.jsonl"
    prior = TransferPrior.from_runs(prior_runs)
    first = make_tuner("ml2tuner", seed=2, prior=prior).tune(
        VtaMeasurer(RESNET18["C9"], HW, dict(c9_cache)), 24, log=log
    )
    header, cache = load_log(log)
    assert header["workload_spec"] == workload_spec(RESNET18["C9"]) and header["hw_spec"] == HW.to_dict()
    restored = read_log(log)
    assert [e.index for e in restored.profiles] == [e.index for e in first.profiles]
    assert restored.best_latency == first.best_latency

    def no_measure(*args, **kwargs):
        raise AssertionError("a resumed run must not measure logged configurations again")

    monkeypatch.setattr("tvm_transfer.vta.ml2tuner.measurer.measure", no_measure)
    again = make_tuner("ml2tuner", seed=2, prior=prior).tune(VtaMeasurer(RESNET18["C9"], HW, cache), 24)
    assert [e.index for e in again.profiles] == [e.index for e in first.profiles]
    # The log of a finished run is itself a prior for the next layer.
    assert len(TransferPrior.from_runs([log])) == 24 + first.n_compile_failures


def test_cli_warm_start_from_logs(capsys, prior_runs, tmp_path):
    code = cli_main(
        ["ml2tune", "--layers", "C9", "--budget", "8", "--batch-size", "8", "--initial-batch-size", "4",
         "--quiet", "--warm-start-from", *map(str, prior_runs)]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0 and "warm start: 96 configurations from 2 earlier run(s)" in text
    assert "| C9 | ml2tuner | 0 | 8 |" in text
    (tmp_path / "bad.jsonl").write_text("{}\n")
    assert (
        cli_main(["ml2tune", "--layers", "C9", "--quiet", "--warm-start-from", str(tmp_path / "bad.jsonl")])
        == 2
    )
    assert "--warm-start-from" in capsys.readouterr().err
