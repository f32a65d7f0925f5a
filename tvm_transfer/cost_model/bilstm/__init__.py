"""The attention BiLSTM: its network, its inputs and their scaling, its training loop. The MetaSchedule
cost model built on them (pretrain / fine-tune) is
:class:`tvm_transfer.cost_model.bilstm_model.BiLSTMCostModel`; nothing here imports the parent folder."""
