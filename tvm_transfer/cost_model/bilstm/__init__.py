"""Attention BiLSTM cost model: network, inputs and scaling, pretrain / fine-tune."""

from tvm_transfer.cost_model.bilstm.model import BiLSTMCostModel

__all__ = ["BiLSTMCostModel"]
