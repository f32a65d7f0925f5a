"""A real small tuning run of the ``mlp`` network on this machine and the transfer pack built from it,
shared by the transfer tests (tuned once per session: ~25 s on 2 cores)."""

from __future__ import annotations

import pytest

from tvm_transfer.transfer.pack import build_pack
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.run import RunConfig
from tvm_transfer.tuning.session import TuneOptions

#: Every task of the mlp network gets one batch (3 tasks x 4 candidates).
RUN_OPTIONS = TuneOptions(trials=12, trials_per_iter=4, population_size=16, progress=False)


@pytest.fixture(scope="session")
def run_options() -> TuneOptions:
    return RUN_OPTIONS


@pytest.fixture(scope="session")
def tuned_mlp(tmp_path_factory, target):
    """``(work dir, NetworkTuneResult)`` of a 12-trial run of ``mlp`` on the host target."""
    work_dir = tmp_path_factory.mktemp("source") / "mlp"
    return work_dir, tune_network(RunConfig.make("mlp", work_dir, target=target, options=RUN_OPTIONS))


@pytest.fixture(scope="session")
def pack(tuned_mlp, tmp_path_factory):
    """A pack built from that run: corpus, an XGBoost model trained on it, the top 3 records per task."""
    return build_pack([tuned_mlp[0]], tmp_path_factory.mktemp("packs") / "mlp.pack", top_k=3)
