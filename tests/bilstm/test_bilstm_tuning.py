"""The BiLSTM inside a real MetaSchedule run, and the `tenset-tools train` pretrain / fine-tune CLI."""

from __future__ import annotations

import torch
from conftest import SOURCE, TARGET, TINY
from ms_helpers import tiny_tune_tir
from tvm.ir.utils import derived_object

from tenset_tools import SHIPPED_DATASET
from tenset_tools.cli import main
from tvm_transfer.cost_model import load_cost_model
from tvm_transfer.cost_model.bilstm_model import BiLSTMCostModel


@derived_object
class CountingBiLSTM(BiLSTMCostModel._cls):
    """The BiLSTM, counting MetaSchedule's calls and the candidates it scored (unchanged otherwise)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = {"predict": 0, "update": 0}
        self.scored = 0

    def predict(self, context, candidates):
        self.calls["predict"] += 1
        self.scored += len(candidates)
        return super().predict(context, candidates)

    def update(self, context, candidates, results):
        self.calls["update"] += 1
        super().update(context, candidates, results)


def test_pretrained_model_guides_and_learns_from_a_real_tune_tir(target, matmul, target_split, tmp_path):
    source, _ = target_split
    model = CountingBiLSTM(**{**TINY, "epochs": 2, "fine_tune_epochs": 3})
    model.pretrain(source.sample(n=200, random_state=0))
    base = {name: p.detach().clone() for name, p in model._net.named_parameters()}
    tiny_tune_tir(matmul, target, tmp_path, model)
    assert model.calls["update"] == 2  # once per measured batch
    assert model.calls["predict"] >= 4 and model.scored >= 64
    assert model.num_samples == 200 + 16  # the pretraining rows and the run's measurements
    after = dict(model._net.named_parameters())
    assert any(not torch.equal(base[n], after[n]) for n in base)  # fine-tuned on the measurements
    assert model.last_fit["rows"] == 16  # ... and on them only: the base is not retrained


def test_cli_pretrains_fine_tunes_and_evaluates(tmp_path, capsys):
    base, tuned = tmp_path / "base.zip", tmp_path / "tuned.zip"
    tiny = [f"--set={name}={value}" for name, value in {**TINY, "epochs": 2}.items()]
    assert (
        main(
            ["train", str(SHIPPED_DATASET), "--model", "bilstm", "--targets", SOURCE, "-o", str(base), *tiny]
        )
        == 0
    )
    assert "| model | bilstm |" in capsys.readouterr().out
    args = ["train", str(SHIPPED_DATASET), "--pretrained", str(base), "--fine-tune-mode", "head"]
    args += [
        "--targets",
        TARGET,
        "--records-per-task",
        "6",
        "--split-scheme",
        "within_task",
        "--train-ratio",
        "0.5",
    ]
    assert main([*args, "-o", str(tuned)]) == 0
    out = capsys.readouterr().out
    assert "fine-tuned (head)" in out and "test pairwise_accuracy" in out
    model = load_cost_model(tuned)
    assert model.pretrained and model.fine_tune_mode == "head"
    assert model.num_samples - model._pretrain_rows <= 6 * 18
    assert main(["eval", str(tuned), str(SHIPPED_DATASET), "--targets", TARGET]) == 0
    assert "pairwise_accuracy" in capsys.readouterr().out


def test_cli_refuses_to_fine_tune_a_model_without_a_base(tmp_path, capsys):
    path = tmp_path / "mlp.zip"
    assert main(["train", str(SHIPPED_DATASET), "--model", "mlp", "--set", "epochs=1", "-o", str(path)]) == 0
    args = ["train", str(SHIPPED_DATASET), "--pretrained", str(path), "-o", str(tmp_path / "x.zip")]
    assert main(args) == 1
    assert "holds a MLPCostModel without a pretrained base" in capsys.readouterr().err
