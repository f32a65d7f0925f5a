"""Hardware configuration and ISA encoding."""

import numpy as np
import pytest

from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig, preset
from vta_ext.isa import (
    N_FIELDS,
    F,
    Op,
    check_fields,
    decode,
    decode_uop,
    encode,
    encode_uop,
    insn_layout,
    uop_layout,
)

EVTA_SIZES = dict(LOG_UOP_BUFF_SIZE=16, LOG_INP_BUFF_SIZE=16, LOG_WGT_BUFF_SIZE=19, LOG_ACC_BUFF_SIZE=18)


def test_default_config_matches_vta():
    hw = HwConfig()
    assert [hw.depth(b) for b in ("INP", "WGT", "ACC", "UOP")] == [2048, 1024, 2048, 8192]
    assert hw.buff_bytes("OUT") == 32 * 1024
    assert hw.bitstream == "1x16_i8w8a32_15_15_18_17"
    assert sum(bits for _, _, bits in insn_layout(Op.GEMM, hw)) == 127
    assert sum(bits for _, bits in uop_layout(hw)) == 32


def test_larger_scratchpads_need_the_wider_instruction():
    with pytest.raises(InvalidConfigError) as info:
        HwConfig(**EVTA_SIZES)
    error = info.value
    assert (error.stage, error.kind, error.needed, error.available) == ("hw", "isa_field_overflow", 135, 128)
    assert error.what.startswith("GEMM.")
    with pytest.raises(InvalidConfigError, match=r"uop\.wgt_idx"):
        HwConfig(**EVTA_SIZES, INSN_BITS=256)
    assert preset("evta").depth("WGT") == 2048


def test_json_round_trip(tmp_path):
    hw = HwConfig(
        LOG_BLOCK_IN=3, LOG_BLOCK_OUT=4, INSN_BITS=256, UOP_BITS=64, LOG_BUS_WIDTH=7, CLOCK_MHZ=333.0
    )
    hw.save(tmp_path / "vta.json")
    assert HwConfig.load(tmp_path / "vta.json") == hw
    assert hw.bitstream.startswith("1x8x16_")
    with pytest.raises(ValueError, match="unknown VTA config keys: BOGUS"):
        HwConfig.from_dict({"BOGUS": 1})


@pytest.mark.parametrize("opcode", [Op.LOAD, Op.STORE, Op.GEMM, Op.ALU, Op.FINISH])
def test_encode_decode_round_trip(opcode):
    hw = preset("evta")
    rng = np.random.default_rng(int(opcode))
    for _ in range(50):
        row = np.zeros(N_FIELDS, dtype=np.int64)
        for _, col, bits in insn_layout(opcode, hw):
            row[col] = (
                rng.integers(-(1 << (bits - 1)), 1 << (bits - 1))
                if col == F.IMM
                else rng.integers(0, 1 << bits)
            )
        row[F.OPCODE] = opcode
        word = encode(row, hw)
        assert word < 1 << hw.INSN_BITS
        assert np.array_equal(decode(word, hw), row)


def test_uop_round_trip_and_overflow():
    hw = HwConfig()
    assert decode_uop(encode_uop(2047, 2047, 1023, hw), hw) == (2047, 2047, 1023)
    with pytest.raises(InvalidConfigError, match="uop"):
        encode_uop(0, 0, 1024, hw)


def test_field_check_names_the_field():
    hw = HwConfig()
    row = np.zeros((1, N_FIELDS), dtype=np.int64)
    row[0, F.OPCODE], row[0, F.Y_PAD1] = Op.LOAD, 16
    with pytest.raises(InvalidConfigError, match=r"LOAD\.y_pad_1") as info:
        check_fields(row, hw)
    assert (info.value.needed, info.value.available) == (16, 15)
    row[0, F.Y_PAD1] = 15
    check_fields(row, hw)
