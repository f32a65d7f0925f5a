"""What the transfer benchmarks share: the run context a report records, the check of a resumed report, the
check that a pack holds out the networks evaluated (or holds them, for exact matches), and the side-by-side
timing of compiled work dirs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import target_context
from tvm_transfer.networks import load_model, network_family, relax_module
from tvm_transfer.runner import network_threads
from tvm_transfer.runtimes import ComparedModel, compare_runtimes, tvm_threads
from tvm_transfer.target import target_id
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.tuning.build import LoadedNetwork, build_network
from tvm_transfer.tuning.repick import DEFAULT_REPICK, repick, resolve_repick_mode
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.workdir import open_database

if TYPE_CHECKING:
    import tvm

    from tvm_transfer.transfer.policy import TransferPolicy

#: The runtimes timed beside the compiled networks (PyTorch eager, `torch.compile`, ONNX Runtime).
REFERENCES = ("eager", "torch.compile", "onnxruntime")


def run_context(pack: TransferPack, target: tvm.target.Target) -> dict:
    """What a transfer report records about its run: target, machine and the pack
    (:func:`pack_context`)."""
    return {**target_context(target), "pack": pack_context(pack)}


def add_also_pack_argument(parser: argparse.ArgumentParser, more: str = "") -> None:
    """Add ``--also-pack LABEL=PATH`` (repeatable) to ``parser``; ``more`` ends its help."""
    parser.add_argument(
        "--also-pack",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also tune every transfer arm with this pack, as arm ARM@LABEL, timed with the others "
        f"(repeatable{more})",
    )


def open_also_packs(parser: argparse.ArgumentParser, specs: list[str]) -> dict[str, TransferPack]:
    """``--also-pack`` values (``LABEL=PATH``) opened: label -> pack."""
    packs = {}
    for spec in specs:
        label, _, path = spec.partition("=")
        if not label or not path or "@" in label or label in packs:
            parser.error(f"--also-pack {spec!r}: give LABEL=PATH, a label without '@' used once")
        packs[label] = TransferPack.open(path)
    return packs


def arms_with_packs(
    arms: dict[str, TransferPolicy | None], pack: TransferPack, also_packs: dict[str, TransferPack]
) -> tuple[dict[str, TransferPolicy | None], dict[str, TransferPack | None]]:
    """``arms`` and, for every second pack (label -> pack), each transfer arm again as ``ARM@LABEL``; with
    each arm's pack (``None`` for TVM alone)."""
    packs = {arm: pack if policy is not None else None for arm, policy in arms.items()}
    with_packs = dict(arms)
    for label, other in also_packs.items():
        for arm, policy in arms.items():
            if policy is not None:
                with_packs[f"{arm}@{label}"], packs[f"{arm}@{label}"] = policy, other
    return with_packs, packs


def also_packs_lines(report: dict) -> list[str]:
    """The Markdown lines naming the pack of each ``ARM@LABEL`` arm of ``report``."""
    lines = []
    for label, other in report.get("also_packs", {}).items():
        used = f"pack `{other['path']}` ({other['describe']})"
        lines += [f"Arms `<arm>@{label}`: the same policy with {used}.", ""]
    return lines


def pack_context(pack: TransferPack) -> dict:
    """What a report records about a pack: path, summary and creation time (by which a resumed run
    recognises it)."""
    return {"path": str(pack.path), "describe": pack.describe(), "created": pack.manifest["created"]}


def load_resumable(
    path: Path,
    pack: TransferPack,
    target: tvm.target.Target,
    also_packs: dict[str, TransferPack] | None = None,
    adding: str | None = None,
) -> dict | None:
    """The report at ``path`` to resume (``None`` when there is none); refuses one measured for another
    target, or one holding results of another pack, or of other second packs (``also_packs``, label ->
    pack, recorded under the report's ``also_packs``): a resumed run must add to the same comparison. The
    second pack labelled ``adding`` may be missing from the report (a run that adds its arms to it)."""
    report = json.loads(path.read_text()) if path.is_file() else None
    if report is None:
        return None
    recorded = {label: other["created"] for label, other in report.get("also_packs", {}).items()}
    given = {label: other.manifest["created"] for label, other in (also_packs or {}).items()}
    if recorded not in (given, {label: c for label, c in given.items() if label != adding}):
        raise SystemExit(
            f"{path} was measured beside other second packs ({', '.join(recorded) or 'none'}): pass "
            "the same --also-pack, or move the report (and the work dirs tuned with them) away"
        )
    if report["target_id"] != target_id(target):
        raise SystemExit(
            f"{path} was measured for {report['target_id']}, this machine is {target_id(target)}: "
            "move it away to start over here"
        )
    if report["pack"]["created"] != pack.manifest["created"]:
        raise SystemExit(
            f"{path} holds results of the pack created {report['pack']['created']}, {pack.path} was "
            f"created {pack.manifest['created']}: pass that pack, or move the report (and the work dirs "
            "tuned with it) away"
        )
    return report


def check_held_out(pack: TransferPack, networks: tuple[str, ...], listed: bool = True) -> None:
    """Refuse a pack that holds any network of the study at any input shape or layout, or (``listed``)
    does not explicitly exclude it. Development studies need not be listed: a network missing from the
    manifest's networks was never in the corpus."""
    excluded = {network_family(n) for n in pack.manifest.get("excluded_networks", [])}
    held = {network_family(n) for n in pack.manifest.get("networks", [])}
    leaked = [
        n for n in networks
        if network_family(n) in held or (listed and network_family(n) not in excluded)
    ]  # fmt: skip
    if leaked:
        raise SystemExit(
            f"{pack.path} does not hold out {', '.join(leaked)}: build it with `tenset-tools pack ... "
            + " ".join(f"--exclude-network {n}" for n in networks)
            + "`"
        )


def check_in_pack(
    pack: TransferPack, networks: tuple[str, ...], target: tvm.target.Target, same_target: bool = True
) -> None:
    """Refuse a pack whose corpus does not hold every network of the study measured on ``target``'s id
    (``same_target``), or holds one measured there, or one measured on no other target (not
    ``same_target``: a study of a CPU the pack never measured)."""
    tid = target_id(target)
    measured = set(pack.corpus(["network", "target_id"]).itertuples(index=False, name=None))
    targets = ", ".join(pack.targets)
    if same_target:
        missing = [n for n in networks if (n, tid) not in measured]
        if missing:
            raise SystemExit(
                f"{pack.path} holds no measurements of {', '.join(missing)} on {tid} (its targets: "
                f"{targets}): run the study on a machine of one of them, or name its networks"
            )
        return
    here = [n for n in networks if (n, tid) in measured]
    elsewhere = {n for n, t in measured if t != tid}
    missing = [n for n in networks if n not in elsewhere]
    if here or missing:
        raise SystemExit(
            f"{pack.path} must hold {', '.join(networks)} measured on other targets than {tid} only (its "
            f"targets: {targets}): pass a pack without this CPU's pass (e.g. the shipped pack of an earlier "
            "commit), or name networks it holds"
        )


def time_work_dirs(
    network: str,
    work_dirs: dict[str, Path],
    target: tvm.target.Target,
    rounds: int,
    references: bool,
    repick_mode: str | Mapping[str, str] = DEFAULT_REPICK,
) -> dict:
    """Build every arm from its work dir and time them (with the reference runtimes when ``references``)
    in the same interleaved rounds: ``{name: {"ms", "fastest_call_ms", "max_abs_error"}}`` (the mean per call
    of the fastest round and the fastest single call, :func:`~tvm_transfer.runtimes.time_interleaved`).
    Every arm is built as ``compile`` builds it, its heaviest tasks re-picked as ``repick_mode`` says
    (:func:`~tvm_transfer.tuning.repick.repick`; one mode for every arm or one per arm); an arm re-picked
    has ``repicked``, ``repick_changed`` and ``repick_mode`` in its entry: the tasks re-picked, those whose
    record changed, and the mode (``auto`` resolved:
    :func:`~tvm_transfer.tuning.repick.resolve_repick_mode`)."""
    model = load_model(network)
    threads = network_threads(target)
    mod = relax_module(model)
    modes = {
        arm: resolve_repick_mode(repick_mode if isinstance(repick_mode, str) else repick_mode[arm], mod)
        for arm in work_dirs
    }
    calls, repicks = {}, {}
    tasks = extract_network_tasks(model, target) if set(modes.values()) != {"none"} else []
    with tvm_threads(threads):
        for arm, work_dir in work_dirs.items():
            database, repicked = repick(modes[arm], open_database(work_dir), tasks, target, mod, model.inputs)
            if repicked is not None:
                repicks[arm] = repicked
            calls[arm] = LoadedNetwork(build_network(mod, database, target), model.inputs).outputs
        results = compare_runtimes(
            ComparedModel(model.name, model.inputs, model.torch_module, model.onnx_path, threads),
            calls,
            runtimes=REFERENCES if references else (),
            rounds=rounds,
        )
    return {
        r.name: {
            "ms": r.seconds * 1e3 if r.seconds else None,
            "fastest_call_ms": r.fastest_call_seconds * 1e3 if r.fastest_call_seconds else None,
            "max_abs_error": r.max_abs_error,
            **(
                {
                    "repicked": len(repicks[r.name]),
                    "repick_changed": sum(c.rank > 0 for c in repicks[r.name]),
                    "repick_mode": modes[r.name],
                }
                if r.name in repicks
                else {}
            ),
        }
        for r in results
    }
