"""Shared helpers for the vta_ext tests."""

import numpy as np
import pytest

from vta_ext.compiler import compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig
from vta_ext.knobs import KnobSpace
from vta_ext.runtime import verify

HW_CONFIGS = {
    "block16": HwConfig(),
    # Stock 128-bit instructions address these blocks only with smaller scratchpads ...
    "block8": HwConfig(LOG_BLOCK=3, LOG_INP_BUFF_SIZE=14, LOG_WGT_BUFF_SIZE=16, LOG_ACC_BUFF_SIZE=16),
    "block32": HwConfig(LOG_BLOCK=5),
    "batch2": HwConfig(LOG_BATCH=1),
    # ... or with the extended instruction format.
    "asym8x16": HwConfig(LOG_BLOCK_IN=3, LOG_BLOCK_OUT=4, INSN_BITS=256, UOP_BITS=64),
}


def _valid_programs(workload, hw, count, seed=0):
    """Up to ``count`` compiled programs of randomly chosen knob settings that compile and pass runtime
    checks, for ``workload`` on ``hw``."""
    space = KnobSpace(workload, hw)
    rng = np.random.default_rng(seed)
    programs = []
    for index in rng.permutation(len(space)):
        try:
            program = compile_program(workload, space.point(int(index)), hw)
            verify(program)
        except InvalidConfigError:
            continue
        programs.append(program)
        if len(programs) == count:
            break
    return programs


@pytest.fixture(params=sorted(HW_CONFIGS))
def hw_config(request):
    return HW_CONFIGS[request.param]


@pytest.fixture
def valid_programs():
    return _valid_programs
