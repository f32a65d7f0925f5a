"""Saved cost models are data, never code: a crafted archive cannot run anything when it is loaded."""

import io
import pickle

import numpy as np
import pytest
import torch
from archive_helpers import assert_tampered_arrays_are_named

from tvm_transfer.common.archive import arrays_bytes, write_archive
from tvm_transfer.cost_model import FORMAT_VERSION, CostModelFileError, load_cost_model, make_cost_model

NETWORK_MODELS = {"mlp": "MLPCostModel", "bilstm": "BiLSTMCostModel"}


class _Hostile:
    """Unpickling it creates the file ``marker``: the proof that loading ran code."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plain_pickle(marker) -> bytes:
    return pickle.dumps({"net": _Hostile(marker)})


def _torch_save(marker) -> bytes:
    """What format version 2 stored: a ``torch.save`` payload."""
    buffer = io.BytesIO()
    torch.save({"net": _Hostile(marker), "mean": np.zeros(3)}, buffer)
    return buffer.getvalue()


def _object_array_npz(marker) -> bytes:
    """An ``.npz`` whose array pickles its objects (what ``np.load(allow_pickle=True)`` would unpickle)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{"net/0.weight": np.array([_Hostile(marker)], dtype=object)})
    return buffer.getvalue()


PAYLOADS = {"pickle": _plain_pickle, "torch.save": _torch_save, "object array": _object_array_npz}


def _empty_data() -> bytes:
    return arrays_bytes(
        {"features": np.zeros((0, 0), np.float32), "costs": np.zeros(0), "groups": np.zeros(0, str)}
    )


def _crafted_archive(path, name: str, blobs: dict[str, bytes]) -> None:
    """A well-formed archive of model ``name`` (right format, version, class and parameters)."""
    meta = {"model": NETWORK_MODELS[name], "params": make_cost_model(name).get_params(), "fitted": True}
    write_archive(path, "tvm-transfer-cost-model", FORMAT_VERSION, meta, {"data.npz": _empty_data(), **blobs})


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_the_payloads_do_run_code_when_unpickled(payload, tmp_path):
    """The control: each crafted payload executes when read the unsafe way."""
    marker = tmp_path / "ran"
    blob = PAYLOADS[payload](marker)
    if payload == "torch.save":
        opened = torch.load(io.BytesIO(blob), weights_only=False)["net"]
    elif payload == "object array":
        opened = np.load(io.BytesIO(blob), allow_pickle=True)["net/0.weight"][0]
    else:
        opened = pickle.loads(blob)["net"]
    opened.close()
    assert marker.exists()


@pytest.mark.parametrize("blob_name", ["model.bin", "data.npz"])
@pytest.mark.parametrize("payload", list(PAYLOADS))
@pytest.mark.parametrize("name", list(NETWORK_MODELS))
def test_a_crafted_archive_is_refused_without_running_it(name, payload, blob_name, tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "hostile.model"
    blobs = {"model.bin": arrays_bytes({}), blob_name: PAYLOADS[payload](marker)}
    _crafted_archive(path, name, blobs)
    with pytest.raises(CostModelFileError, match=rf"hostile\.model: {blob_name}"):
        load_cost_model(path)
    with pytest.raises(CostModelFileError, match=rf"hostile\.model: {blob_name}"):
        make_cost_model(name).load(str(path))
    assert not marker.exists()


@pytest.fixture(scope="module")
def saved_mlp(tmp_path_factory):
    """A small fitted MLP, saved, and the rows it predicts."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 5)).astype(np.float32)
    model = make_cost_model("mlp", hidden=8, epochs=5).fit_features(
        features, rng.uniform(size=40), ["g"] * 40
    )
    path = tmp_path_factory.mktemp("mlp") / "mlp.model"
    model.save(str(path))
    return path, model, features


def test_mlp_round_trip_gives_identical_predictions(saved_mlp):
    path, model, features = saved_mlp
    restored = load_cost_model(path)
    np.testing.assert_array_equal(restored.predict_features(features), model.predict_features(features))


def test_a_missing_or_misshaped_weight_names_the_file_and_the_key(saved_mlp, tmp_path):
    assert_tampered_arrays_are_named(saved_mlp[0], tmp_path, "net/0.weight", "net/2.bias")
