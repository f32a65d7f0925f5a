"""The transfer-pack options of the tuning commands (``tune``, ``tune-network``, ``compile``, ``demo``):
``--transfer-pack PATH`` and ``--no-transfer``, and what they resolve to.

Without either flag the pack shipped in the package (:data:`tvm_transfer.transfer.DEFAULT_PACK`) is used;
when none is installed the command runs without transfer and says so in one info line.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tenset_tools.command import UsageError

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    from tvm_transfer.networks import LoadedModel
    from tvm_transfer.transfer.pack import TransferPack

log = logging.getLogger(__name__)

__all__ = ["add_transfer_arguments", "apply_pack_to_network", "resolve_transfer_pack", "transfer_cost_model"]

_RESOLVED = "_transfer_pack_resolved"


def add_transfer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--transfer-pack PATH`` and ``--no-transfer``: read by :func:`resolve_transfer_pack`."""
    group = parser.add_argument_group("transfer pack (docs/transfer_pack.md)")
    group.add_argument(
        "--transfer-pack",
        metavar="PATH",
        help="use this transfer pack (`tenset-tools pack WORK_DIR... -o PATH`) instead of the one shipped "
        "with the package: tasks it measured on this target are applied with 0 trials, the others tune "
        "under its pretrained model, guarded",
    )
    group.add_argument(
        "--no-transfer",
        action="store_true",
        help="use no transfer pack: every task is tuned from scratch with --cost-model",
    )


def resolve_transfer_pack(args: argparse.Namespace) -> TransferPack | None:
    """The pack the options select, opened and verified once per command: ``--transfer-pack``, else the
    default pack when installed; ``None`` with ``--no-transfer`` or when no default pack is installed (one
    info line says so). A pack that fails verification is a :class:`~tenset_tools.command.UsageError`
    naming the option and the reason."""
    if hasattr(args, _RESOLVED):
        return getattr(args, _RESOLVED)
    from tvm_transfer.transfer import DEFAULT_PACK
    from tvm_transfer.transfer.pack import MANIFEST_FILE, TransferPack, TransferPackError

    pack = None
    if getattr(args, "no_transfer", False):
        if getattr(args, "transfer_pack", None):
            raise UsageError("--transfer-pack and --no-transfer exclude each other")
    elif getattr(args, "transfer_pack", None) or (Path(DEFAULT_PACK) / MANIFEST_FILE).is_file():
        path = args.transfer_pack or DEFAULT_PACK
        flag = "--transfer-pack" if args.transfer_pack else "default transfer pack"
        try:
            pack = TransferPack.open(path)
        except TransferPackError as error:
            raise UsageError(f"{flag}: {error}") from None
        log.info("using %s", pack.describe())
    else:
        log.info(
            "no transfer pack is installed (%s): tuning without transfer; --transfer-pack PATH uses one",
            DEFAULT_PACK,
        )
    setattr(args, _RESOLVED, pack)
    return pack


def transfer_cost_model(
    pack: TransferPack | None, cost_model: str | ms.CostModel, seed: int = 0
) -> str | ms.CostModel:
    """The cost model of a run with ``pack``: its default pretrained model under a
    :class:`~tvm_transfer.transfer.guard.GuardedCostModel` whose online model is ``cost_model`` (a name or
    a model); ``cost_model`` itself without a pack or when the pack has no model."""
    if pack is None or not pack.model_names:
        return cost_model
    from tvm_transfer.transfer.guard import GuardedCostModel
    from tvm_transfer.tuning.session import resolve_cost_model

    return GuardedCostModel(pack.model(), online=resolve_cost_model(cost_model, seed))


def apply_pack_to_network(
    pack: TransferPack,
    model: str | LoadedModel,
    work_dir: Path,
    target: Target,
    layout_free: bool = True,
    wait: bool = False,
) -> int:
    """Apply ``pack`` to ``model``'s tasks (extracted as ``compile`` looks them up) in ``work_dir``, holding
    its lock (``wait``: queue behind another run); returns the number of tasks that have a schedule from
    the pack there."""
    from tvm_transfer.transfer.apply import apply_pack, extracted_pairs
    from tvm_transfer.tuning.network import extract_network_tasks
    from tvm_transfer.tuning.workdir import work_dir_lock

    tasks = extract_network_tasks(model, target, layout_free)
    with work_dir_lock(work_dir, wait=wait):
        return len(apply_pack(pack, extracted_pairs(tasks), target, work_dir))
