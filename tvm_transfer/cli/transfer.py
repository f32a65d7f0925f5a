"""The transfer-pack options of the tuning commands (``tune``, ``tune-network``, ``compile``, ``demo``):
``--transfer-pack PATH`` and ``--no-transfer``, and what they resolve to: the pack (once per command) and
the run's :class:`~tvm_transfer.tuning.plan.TuningPlan` under the default transfer policy.

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
    from tvm_transfer.tuning.plan import TuningPlan
    from tvm_transfer.tuning.session import TuneOptions

log = logging.getLogger(__name__)

__all__ = ["add_transfer_arguments", "resolve_transfer_pack", "transfer_plan"]


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
    """The pack the options select, opened and verified (call it once per command): ``--transfer-pack``,
    else the default pack when installed; ``None`` with ``--no-transfer`` or when no default pack is
    installed (one info line says so). A pack that fails verification is a
    :class:`~tenset_tools.command.UsageError` naming the option and the reason."""
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
    return pack


def transfer_plan(
    pack: TransferPack | None, options: TuneOptions, online: str | ms.CostModel | None, *, tunes: bool = True
) -> TuningPlan:
    """The run's tuning plan under the default transfer policy
    (:meth:`~tvm_transfer.transfer.policy.TransferPolicy.plan`): with ``pack`` its guarded pretrained
    model, ``online`` (``--cost-model``) learning from the run, its seeded search and exact matches;
    without one ``online``, by default TVM's own ``XGBModel``, under evolutionary search. A run that does
    not tune (``tunes`` false) takes only the pack's exact matches
    (:meth:`~tvm_transfer.transfer.policy.TransferPolicy.build_plan`)."""
    from tvm_transfer.transfer.policy import DEFAULT_POLICY

    return DEFAULT_POLICY.plan(pack, options, online) if tunes else DEFAULT_POLICY.build_plan(pack)
