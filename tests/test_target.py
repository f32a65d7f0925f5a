from pathlib import Path

import pytest
import tvm

from tvm_transfer.target import (
    CPU_CACHES,
    HW_FEATURE_NAMES,
    UnsupportedTargetError,
    hardware_features,
    hardware_params,
    host_core_count,
    host_target,
    last_level_cache_bytes,
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


def _cache(folder: Path, level: int, kind: str, size: str) -> None:
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size)):
        (folder / name).write_text(f"{value}\n")


def test_the_last_level_cache_is_the_highest_data_or_unified_level(tmp_path):
    _cache(tmp_path / "index0", 1, "Data", "48K")
    _cache(tmp_path / "index1", 1, "Instruction", "32K")
    _cache(tmp_path / "index2", 2, "Unified", "2048K")
    _cache(tmp_path / "index3", 3, "Unified", "32768K")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    _cache(tmp_path / "index4", 4, "Instruction", "1M")  # never the last level of data
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    assert last_level_cache_bytes(tmp_path / "absent") is None


def test_this_machine_reports_a_last_level_cache_of_megabytes():
    if not CPU_CACHES.is_dir():
        pytest.skip("this OS does not describe its caches in /sys")
    assert 1 << 20 <= last_level_cache_bytes() <= 1 << 30


def test_a_cpu_target_given_as_json_without_cores_gets_the_hosts():
    from tvm_transfer.cli import build_parser, resolve_target

    spec = '{"kind": "llvm", "mcpu": "x86-64-v3"}'
    target = resolve_target(build_parser().parse_args(["tune", "matmul", "--target", spec]))
    assert target_id(target) == f"llvm/x86-64-v3/{host_core_count()}"
