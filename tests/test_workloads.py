import numpy as np
import pytest
import tvm

from tvm_transfer.workloads import SHAPE_PARAMS, make_workload, parse_workload

SMALL = {
    "matmul": (16, 24, 8),
    "batch_matmul": (2, 8, 12, 4),
    "dense": (4, 12, 8),
    "conv2d": (1, 7, 7, 4, 8, 3, 2, 1),
    "depthwise_conv2d": (1, 8, 8, 4, 3, 1, 1),
}


@pytest.mark.parametrize("kind", list(SHAPE_PARAMS))
def test_te_definition_matches_pytorch(kind, target):
    workload = make_workload(kind, SMALL[kind])
    inputs = workload.random_inputs(seed=3)
    executable = tvm.compile(tvm.IRModule({"main": workload.prim_func()}), target=target)
    out_shape = tuple(int(d) for d in workload.tensors()[-1].shape)
    args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.tensor(np.zeros(out_shape, np.float32))]
    executable["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), workload.reference(inputs), rtol=1e-4, atol=1e-4)


def test_flops_count_multiply_adds_twice():
    assert make_workload("matmul", (2, 3, 4)).flops == 48
    # 3x3 conv, stride 1, pad 1 keeps 14x14: 2 * 14*14 * 256 * 256 * 9
    assert make_workload("conv2d").flops == 2 * 14 * 14 * 256 * 256 * 9


def test_bad_shapes_are_rejected_with_the_expected_order():
    with pytest.raises(ValueError, match="takes 3 shape values \\(M,N,K\\)"):
        parse_workload("matmul", "4,4")
    with pytest.raises(ValueError, match="unknown workload kind 'gemm'"):
        make_workload("gemm")
    assert parse_workload("matmul", "8x16x32").shape == {"M": 8, "N": 16, "K": 32}
