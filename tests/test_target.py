from pathlib import Path

import pytest
import tvm

from tvm_transfer.target import (
    HW_FEATURE_NAMES,
    UnsupportedTargetError,
    hardware_features,
    hardware_params,
    host_core_count,
    host_target,
    target_id,
    target_of_id,
)


def _host_vector_bytes() -> int:
    flags = next(
        (line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("flags")), [],
    )  # fmt: skip
    return 64 if "avx512f" in flags else 32 if "avx2" in flags else 16


def test_host_target_names_the_cpu_and_its_cores():
    target = host_target()
    assert target.kind.name == "llvm"
    assert target.attrs["mcpu"] not in ("", "generic", "native")
    assert int(target.attrs["num-cores"]) == host_core_count()


def test_host_hardware_vector_has_core_count_and_vector_width():
    params = hardware_params(host_target())
    assert params["num_cores"] == host_core_count()
    assert params["vector_unit_bytes"] == _host_vector_bytes()
    assert params["cache_line_bytes"] == 64
    assert params["warp_size"] == 0 and params["max_threads_per_block"] == 0


def test_vector_width_follows_mcpu():
    def width(mcpu):
        return hardware_params(tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 4}))

    assert width("x86-64")["vector_unit_bytes"] == 16
    assert width("haswell")["vector_unit_bytes"] == 32
    assert width("skylake-avx512")["num_cores"] == 4


def test_gpu_target_uses_ansor_defaults_and_its_attributes():
    cuda = tvm.target.Target({"kind": "cuda", "max_num_threads": 512, "thread_warp_size": 32})
    features = hardware_features(cuda)
    assert features.shape == (len(HW_FEATURE_NAMES),)
    assert dict(zip(HW_FEATURE_NAMES, features, strict=True)) == {
        "num_cores": -1, "vector_unit_bytes": 16, "cache_line_bytes": 64,
        "max_shared_memory_per_block": 49152, "max_local_memory_per_block": 2147483647,
        "max_threads_per_block": 512, "max_vthread_extent": 8, "warp_size": 32,
    }  # fmt: skip


def test_unknown_target_kind_is_a_clear_error():
    with pytest.raises(UnsupportedTargetError, match=r"'ext_dev'.*supported kinds: c, cuda, llvm"):
        hardware_params(tvm.target.Target({"kind": "ext_dev"}))


def test_target_of_id_inverts_target_id_and_refuses_other_ids():
    for tid in ("llvm/znver4/2", "llvm/x86-64-v3/1"):
        assert target_id(target_of_id(tid)) == tid
    for bad in ("llvm/znver4", "llvm/znver4/two", "cuda/sm_80/1", "llvm/znver4/2/extra"):
        with pytest.raises(ValueError, match="not kind/mcpu/num-cores"):
            target_of_id(bad)
