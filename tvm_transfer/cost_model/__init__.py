"""MetaSchedule cost models: ours (XGBoost, LightGBM, MLP, attention BiLSTM) and TVM's own as comparison
points."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tvm.s_tir import meta_schedule as ms

from tvm_transfer.cost_model.base import (
    FORMAT_VERSION,
    CostModelFileError,
    LearnedCostModel,
    saved_model_class,
)


def _xgboost(**kwargs):
    from tvm_transfer.cost_model.gbdt import XGBoostCostModel

    return XGBoostCostModel(**kwargs)


def _lightgbm(**kwargs):
    from tvm_transfer.cost_model.gbdt import LightGBMCostModel

    return LightGBMCostModel(**kwargs)


def _mlp(**kwargs):
    from tvm_transfer.cost_model.mlp import MLPCostModel

    return MLPCostModel(**kwargs)


def _bilstm(pretrained: str | Path | None = None, **kwargs):
    """A BiLSTM model; with ``pretrained`` (a file saved after ``pretrain``), that model, its
    hyper-parameters overridden by ``kwargs`` (e.g. ``fine_tune_mode="head"``)."""
    from tvm_transfer.cost_model.bilstm_model import BiLSTMCostModel

    if pretrained is None:
        return BiLSTMCostModel(**kwargs)
    model = BiLSTMCostModel()
    model.load(str(pretrained))
    model.set_params(**kwargs)
    return model


def _multilevel(**kwargs):
    from tvm_transfer.cost_model.multilevel import MultiLevelCostModel

    return MultiLevelCostModel(**kwargs)


def _tvm_xgb(seed: int = 0, **kwargs):
    # TVM's XGBModel scores at random until it holds num_warmup_samples (default 100) measurements.
    return ms.cost_model.XGBModel(config=ms.cost_model.xgb_model.XGBConfig(seed=seed), **kwargs)


def _tvm_xgb_nowarmup(seed: int = 0, **kwargs):
    return _tvm_xgb(seed=seed, num_warmup_samples=0, **kwargs)


def _tvm_random(seed: int = 0, **kwargs):
    return ms.cost_model.RandomModel(seed=seed + 1, **kwargs)  # RandomModel rejects seed 0


#: Name -> factory; the names the CLI, the benchmarks and :func:`make_cost_model` accept.
COST_MODELS: dict[str, Callable[..., ms.CostModel]] = {
    "xgboost": _xgboost,
    "lightgbm": _lightgbm,
    "mlp": _mlp,
    "bilstm": _bilstm,
    "multilevel": _multilevel,
    "tvm-xgb": _tvm_xgb,
    "tvm-xgb-nowarmup": _tvm_xgb_nowarmup,
    "tvm-random": _tvm_random,
}


# Saved-model class name -> COST_MODELS name, for the models that save themselves (ours).
_SAVED_CLASSES = {
    "XGBoostCostModel": "xgboost",
    "LightGBMCostModel": "lightgbm",
    "MLPCostModel": "mlp",
    "BiLSTMCostModel": "bilstm",
    "MultiLevelCostModel": "multilevel",
}


#: Names of our learned cost models: those that train on a dataset (``fit_frame``) and save themselves.
LEARNED_COST_MODELS: tuple[str, ...] = tuple(_SAVED_CLASSES.values())


def load_cost_model(path: str | Path) -> ms.CostModel:
    """Load a model saved by ``LearnedCostModel.save``, whichever of our classes it is."""
    saved = saved_model_class(path)
    if saved not in _SAVED_CLASSES:
        raise CostModelFileError(f"{path}: holds a {saved} model, not one of {sorted(_SAVED_CLASSES)}")
    model = make_cost_model(_SAVED_CLASSES[saved])
    model.load(str(path))
    return model


def make_cost_model(name: str, **kwargs) -> ms.CostModel:
    """Create a cost model by name (see :data:`COST_MODELS`); ``kwargs`` go to its constructor."""
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown cost model {name!r}; choose one of {', '.join(COST_MODELS)}") from None
    return factory(**kwargs)


__all__ = [
    "COST_MODELS",
    "FORMAT_VERSION",
    "LEARNED_COST_MODELS",
    "CostModelFileError",
    "LearnedCostModel",
    "load_cost_model",
    "make_cost_model",
    "saved_model_class",
]
