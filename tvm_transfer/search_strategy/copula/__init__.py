"""Gaussian-copula transfer tuning (Randall et al., ICS'23, arXiv 2401.04669) for MetaSchedule and vta_ext.

* :mod:`.encoding`: design-space decisions <-> numeric vectors, repair, validated replay (the repair rule
  and post-processing: :mod:`tvm_transfer.search_strategy.replay`);
* :mod:`.copula`: the conditional Gaussian copula over the best source configurations;
* :mod:`.budget`: the paper's hypergeometric few-shot budget;
* :mod:`.sources`: source records from MetaSchedule work dirs;
* :mod:`.anchors`: source records as rows per design space, and the sources' best configurations repaired
  to a new task in the order worth trying;
* :mod:`.sampling`: the proposal loop and budget estimate every copula sampler shares;
* :mod:`.sampler` / :mod:`.strategy`: copula proposals of MetaSchedule candidates and the search strategy;
* :mod:`tvm_transfer.vta.copula`: the sampler for vta_ext knob spaces.
"""

from tvm_transfer.search_strategy.copula.budget import BudgetEstimate, estimate_budget, success_probability
from tvm_transfer.search_strategy.copula.copula import ConditionalCopula, best_quantile
from tvm_transfer.search_strategy.copula.encoding import SpaceEncoding, trace_decisions, trace_signature
from tvm_transfer.search_strategy.copula.sampler import Proposal, TraceCopulaSampler
from tvm_transfer.search_strategy.copula.sources import (
    SourceRecord,
    load_sources,
    pretrain_on_sources,
    task_descriptor,
)
from tvm_transfer.search_strategy.copula.strategy import CopulaSearch

__all__ = [
    "BudgetEstimate",
    "ConditionalCopula",
    "CopulaSearch",
    "Proposal",
    "SourceRecord",
    "SpaceEncoding",
    "TraceCopulaSampler",
    "best_quantile",
    "estimate_budget",
    "load_sources",
    "pretrain_on_sources",
    "success_probability",
    "task_descriptor",
    "trace_decisions",
    "trace_signature",
]
