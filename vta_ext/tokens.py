"""The dependency-token protocol between VTA's load, compute and store modules.

Four FIFOs carry tokens: load->compute (``l2g``: data loaded), compute->load (``g2l``: scratchpad slot
free), compute->store (``g2s``: results ready), store->compute (``s2g``: accumulator slot free). "prev" and
"next" in an instruction's flags are relative to its module (load < compute < store). Each FIFO has one
producer module that pushes in program order and one consumer that pops in program order, so the m-th pop
receives the m-th push: every instruction depends on its predecessor in its module and on the pushes it
pops. A program deadlocks when those dependencies admit no execution order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_ext.errors import InvalidConfigError
from vta_ext.isa import F, Module, module_of

# (queue name, producer module, push flag, consumer module, pop flag)
QUEUES = (
    ("l2g", Module.LOAD, F.PUSH_NEXT, Module.COMPUTE, F.POP_PREV),
    ("g2l", Module.COMPUTE, F.PUSH_PREV, Module.LOAD, F.POP_NEXT),
    ("g2s", Module.COMPUTE, F.PUSH_NEXT, Module.STORE, F.POP_PREV),
    ("s2g", Module.STORE, F.PUSH_PREV, Module.COMPUTE, F.POP_NEXT),
)
NEVER = -2  # dependency on a push that never happens


@dataclass(frozen=True)
class TokenGraph:
    """Per instruction: its module and the instructions whose pushes its pops receive (-1: none)."""

    module: np.ndarray
    dep_prev: np.ndarray  # push popped through the pop_prev flag
    dep_next: np.ndarray  # push popped through the pop_next flag
    pushes: dict[str, int]
    pops: dict[str, int]


def token_graph(insns: np.ndarray) -> TokenGraph:
    """Match pops to pushes; raise ``bad_dependency`` for a flag on a queue the module is not part of."""
    module = module_of(insns)
    _check_flags(insns, module)
    dep_prev = np.full(len(insns), -1, dtype=np.int64)
    dep_next = np.full(len(insns), -1, dtype=np.int64)
    pushes, pops = {}, {}
    for name, producer, push_flag, consumer, pop_flag in QUEUES:
        pushers = np.flatnonzero((module == producer) & (insns[:, push_flag] != 0))
        poppers = np.flatnonzero((module == consumer) & (insns[:, pop_flag] != 0))
        matched = np.full(len(poppers), NEVER, dtype=np.int64)
        count = min(len(pushers), len(poppers))
        matched[:count] = pushers[:count]
        (dep_prev if pop_flag == F.POP_PREV else dep_next)[poppers] = matched
        pushes[name], pops[name] = len(pushers), len(poppers)
    return TokenGraph(module, dep_prev, dep_next, pushes, pops)


def _check_flags(insns: np.ndarray, module: np.ndarray) -> None:
    """The load module has no "prev" queue and the store module no "next" queue."""
    for mod, flags in ((Module.LOAD, (F.POP_PREV, F.PUSH_PREV)), (Module.STORE, (F.POP_NEXT, F.PUSH_NEXT))):
        for flag in flags:
            bad = np.flatnonzero((module == mod) & (insns[:, flag] != 0))
            if len(bad):
                raise InvalidConfigError(
                    "runtime",
                    "bad_dependency",
                    len(bad),
                    0,
                    f"{mod.name}.{flag.name}",
                    "instructions",
                    f"first at instruction {bad[0]}",
                )


def execution_order(graph: TokenGraph) -> list[int]:
    """A legal execution order: each module runs ahead as far as its tokens allow (as VTA's simulator
    does); raises ``deadlock`` (stage runtime) when no module can proceed before all are done."""
    module, dep_prev, dep_next = graph.module.tolist(), graph.dep_prev.tolist(), graph.dep_next.tolist()
    n = len(module)
    done = bytearray(n)
    queues = [[i for i in range(n) if module[i] == m] for m in range(3)]
    heads = [0, 0, 0]
    order: list[int] = []
    progress = True
    while progress:
        progress = False
        for m in range(3):
            queue, head = queues[m], heads[m]
            while head < len(queue):
                i = queue[head]
                a, b = dep_prev[i], dep_next[i]
                if a == NEVER or b == NEVER or (a >= 0 and not done[a]) or (b >= 0 and not done[b]):
                    break
                done[i] = 1
                order.append(i)
                head += 1
            if head != heads[m]:
                heads[m], progress = head, True
    if len(order) < n:
        blocked = [Module(m).name.lower() for m in range(3) if heads[m] < len(queues[m])]
        raise InvalidConfigError(
            "runtime",
            "deadlock",
            n,
            len(order),
            "+".join(blocked),
            "instructions",
            "modules waiting for tokens that never arrive",
        )
    return order
