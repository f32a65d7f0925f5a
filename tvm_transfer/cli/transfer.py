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

    from tvm_transfer.transfer.pack import TransferPack
    from tvm_transfer.tuning.session import TuneOptions

log = logging.getLogger(__name__)

__all__ = [
    "add_transfer_arguments",
    "resolve_transfer_pack",
    "transfer_cost_model",
    "transfer_search",
]

_RESOLVED = "_transfer_pack_resolved"


def add_transfer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--transfer-pack PATH`` and ``--no-transfer``: read by :func:`resolve_transfer_pack`."""
    group = parser.add_argument_group("transfer pack (docs/transfer_pack.md)")
    group.add_argument(
        "--transfer-pack",
        metavar="PATH",
        help="use this transfer pack (`tenset-tools pack WORK_DIR... -o PATH`) instead of the one shipped "
        "with the package: tasks it measured on this target are applied with 0 trials (and tuned on from "
        "there when --trials gives a task more than the pack measured), the others measure its best "
        "schedules of similar tasks first and tune under its pretrained model, guarded",
    )
    group.add_argument(
        "--no-transfer",
        action="store_true",
        help="use no transfer pack: TVM's own tuning (MetaSchedule's XGBModel unless --cost-model names "
        "another, evolutionary search), every task from scratch",
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


def transfer_cost_model(args: argparse.Namespace) -> str | ms.CostModel:
    """The run's cost model (:meth:`TransferPolicy.cost_model
    <tvm_transfer.transfer.policy.TransferPolicy.cost_model>` of the default policy): the selected pack's
    pretrained model guarded, ``--cost-model`` learning online; without a pack ``--cost-model``, by default
    TVM's own ``XGBModel``."""
    from tvm_transfer.transfer.policy import DEFAULT_POLICY

    return DEFAULT_POLICY.cost_model(resolve_transfer_pack(args), args.cost_model, args.seed)


def transfer_search(
    args: argparse.Namespace, options: TuneOptions
) -> ms.search_strategy.SearchStrategy | None:
    """The search the selected pack seeds (default policy); ``None`` (evolutionary search) without one."""
    from tvm_transfer.transfer.policy import DEFAULT_POLICY

    return DEFAULT_POLICY.search_strategy(resolve_transfer_pack(args), options)
