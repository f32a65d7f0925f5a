"""The transfer pack: one versioned folder holding what tuning can transfer from.

Layout (every part named, sized and checksummed in the manifest):

``manifest.json``
    ``format`` (``"tvm-transfer-pack"``), ``format_version`` (:data:`FORMAT_VERSION`), ``tvm_version`` and
    ``package_commit`` of the tools that built it, ``created`` (UTC, ISO 8601), ``targets`` (target ids),
    ``networks``, ``records`` (``corpus``: dataset rows, ``schedules``: kept records, ``workloads``:
    distinct workloads), ``models`` (name -> part path; ``default_model`` names the one tuning uses) and
    ``parts`` (path -> ``{"sha256", "bytes"}``).
``corpus.parquet``
    the measured corpus, a dataset of :mod:`tenset_tools.schema`.
``models/NAME.model``
    cost models trained on the corpus, saved by the package's own ``save`` (versioned zip archives of
    plain arrays and the boosters' own formats).
``schedules/``
    the best-schedule database (:mod:`tvm_transfer.transfer.schedules`).

:meth:`TransferPack.open` verifies the format version and every part's size and SHA-256 before anything
is read, and refuses a pack with a :class:`TransferPackError` whose message says what to do. Nothing in a
pack is unpickled. :func:`build_pack` writes a new pack into a temporary folder beside the target and
renames it into place only when it is complete, so a failed build never leaves half a pack.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tvm

from tenset_tools.atomic import atomic_write_text
from tvm_transfer.transfer.schedules import DEFAULT_TOP_K, ScheduleDatabase

if TYPE_CHECKING:
    from tvm_transfer.search_strategy.copula import TraceCopulaSampler

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "READABLE_VERSIONS",
    "TransferPack",
    "TransferPackError",
    "build_pack",
    "check_pack_models",
    "part_checksums",
]

FORMAT_NAME = "tvm-transfer-pack"
#: Version of the pack layout written; bump it when a part's layout changes. Version 3 keeps one workload
#: file for all targets of the best-schedule database, where version 2 kept a copy in each target's folder.
FORMAT_VERSION = 3
#: Versions :meth:`TransferPack.open` reads (so that ``--extend`` can grow a version-2 pack into version 3).
READABLE_VERSIONS = (2, 3)
MANIFEST_FILE = "manifest.json"
CORPUS_FILE = "corpus.parquet"
SCHEDULES_DIR = "schedules"
MODELS_DIR = "models"

_REBUILD = (
    "rebuild it with `tenset-tools pack WORK_DIR... -o PACK`, or reinstall tvm-transfer for the default pack"
)


class TransferPackError(ValueError):
    """A transfer pack cannot be used: missing, another format version, a part missing or changed."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def part_checksums(root: Path) -> dict[str, dict]:
    """A manifest's ``parts`` for the pack folder ``root``: ``{relative path: {"sha256": hex digest,
    "bytes": size}}`` of every file under it except the manifest."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    return {p.relative_to(root).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size} for p in files}


def package_commit() -> str | None:
    """The git commit of the tvm-transfer sources in use (``None`` outside a git checkout)."""
    source = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@dataclass
class TransferPack:
    """An opened, verified transfer pack (use :meth:`open`)."""

    path: Path
    manifest: dict

    @classmethod
    def open(cls, path: str | os.PathLike) -> TransferPack:
        """Open the pack at ``path`` after checking its manifest, format version and the size and SHA-256
        of every part. Raises :class:`TransferPackError` (one line saying what to do) otherwise."""
        root = Path(path)
        manifest_path = root / MANIFEST_FILE
        if not manifest_path.is_file():
            what = "no such folder" if not root.exists() else f"no {MANIFEST_FILE}"
            raise TransferPackError(f"{root}: not a transfer pack ({what}); {_REBUILD}")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise TransferPackError(f"{manifest_path}: unreadable manifest ({error}); {_REBUILD}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
            raise TransferPackError(f"{manifest_path}: not a {FORMAT_NAME} manifest; {_REBUILD}")
        version = manifest.get("format_version")
        if version not in READABLE_VERSIONS:
            readable = " and ".join(str(v) for v in READABLE_VERSIONS)
            newer = isinstance(version, int) and version > max(READABLE_VERSIONS)
            what_to_do = "upgrade tvm-transfer to read it, or " + _REBUILD if newer else _REBUILD
            raise TransferPackError(
                f"{root}: pack format version {version}, this tvm-transfer reads versions {readable}; "
                f"{what_to_do}"
            )
        parts = manifest.get("parts")
        if not isinstance(parts, dict) or CORPUS_FILE not in parts:
            raise TransferPackError(
                f"{manifest_path}: the manifest lists no corpus ({CORPUS_FILE}); {_REBUILD}"
            )
        for name, part in sorted(parts.items()):
            file = root / name
            if ".." in Path(name).parts or Path(name).is_absolute():
                raise TransferPackError(f"{manifest_path}: part {name!r} lies outside the pack; {_REBUILD}")
            if not file.is_file():
                raise TransferPackError(f"{root}: part {name} is missing; {_REBUILD}")
            if file.stat().st_size != part.get("bytes") or _sha256(file) != part.get("sha256"):
                raise TransferPackError(
                    f"{root}: part {name} does not match its checksum (changed or truncated); {_REBUILD}"
                )
        if manifest.get("tvm_version") != tvm.__version__:
            log.warning(
                "transfer pack %s was built with TVM %s, this is TVM %s: schedules that no longer replay are "
                "skipped",
                root,
                manifest.get("tvm_version"),
                tvm.__version__,
            )
        return cls(root, manifest)

    # ---- parts -----------------------------------------------------------------------------------------
    @property
    def targets(self) -> list[str]:
        """Target ids the pack holds measurements of."""
        return list(self.manifest.get("targets", []))

    @property
    def model_names(self) -> list[str]:
        """Names of the pack's cost models."""
        return list(self.manifest.get("models", {}))

    def corpus(self, columns: Iterable[str] | None = None):
        """The corpus as a dataset frame (:func:`tenset_tools.schema.read_dataset`)."""
        from tenset_tools.schema import read_dataset

        return read_dataset(self.path / CORPUS_FILE, columns)

    def measurements(self, task_id: str, target_id: str) -> int:
        """How many candidates of task ``task_id`` (:func:`tenset_tools.metaschedule.task_id_of_mod`) the
        corpus measured on target ``target_id``, failed ones included (counted once, then cached)."""
        if not hasattr(self, "_measurements"):
            counts = self.corpus(["task_id", "target_id"]).value_counts()
            self._measurements = {key: int(n) for key, n in counts.items()}
        return self._measurements.get((task_id, target_id), 0)

    def schedules(self) -> ScheduleDatabase:
        """The best-schedule database (read once, then cached)."""
        if not hasattr(self, "_schedules"):
            try:
                self._schedules = ScheduleDatabase.read(self.path / SCHEDULES_DIR)
            except (OSError, ValueError) as error:
                raise TransferPackError(
                    f"{self.path}: unreadable schedule database ({error}); {_REBUILD}"
                ) from None
        return self._schedules

    def seed_sampler(self) -> TraceCopulaSampler:
        """The copula sampler (:class:`~tvm_transfer.search_strategy.copula.TraceCopulaSampler`) fitted on
        the fastest schedule of every workload and target of :meth:`schedules`, which seeds searches from
        the pack (fitted once, then cached: fitting a copula per design space takes seconds; a fitted
        sampler is only read, so every search seeded from the pack shares it)."""
        if not hasattr(self, "_seed_sampler"):
            from tvm_transfer.search_strategy.copula import TraceCopulaSampler

            # The sampler keeps each source task's best tenth: of a pack's few records per task, its fastest.
            self._seed_sampler = TraceCopulaSampler().fit(self.schedules().source_records(ranks=1))
        return self._seed_sampler

    def model(self, name: str | None = None):
        """A fresh copy of cost model ``name`` (default: the manifest's ``default_model``), loaded from its
        archive; ``None`` when the pack has no model."""
        from tvm_transfer.cost_model import CostModelFileError, load_cost_model

        models = self.manifest.get("models", {})
        name = name or self.manifest.get("default_model")
        if name is None:
            return None
        if name not in models:
            raise TransferPackError(
                f"{self.path}: no model {name!r}; the pack has {sorted(models) or 'none'}"
            )
        if models[name] not in self.manifest.get("parts", {}):  # only checksummed files are read
            raise TransferPackError(f"{self.path}: model {name!r} is not a verified part; {_REBUILD}")
        try:
            return load_cost_model(str(self.path / models[name]))
        except CostModelFileError as error:
            raise TransferPackError(f"{self.path}: model {name!r} unreadable ({error}); {_REBUILD}") from None

    def describe(self) -> str:
        """One line: path, version, targets, networks and record counts."""
        records, version = self.manifest.get("records", {}), self.manifest["format_version"]
        return (
            f"transfer pack {self.path} (format {version}): {records.get('schedules', 0)} schedules "
            f"of {records.get('workloads', 0)} workloads on {', '.join(self.targets) or 'no target'}; "
            f"{records.get('corpus', 0)} corpus records; models: {', '.join(self.model_names) or 'none'}"
        )


def check_pack_models(models: Sequence[str], model_files: Sequence[str | os.PathLike]) -> None:
    """Raise ``ValueError`` when :func:`build_pack` cannot pack these models: a name of ``models`` that
    does not train on a dataset (:data:`~tvm_transfer.cost_model.LEARNED_COST_MODELS`), or two models of
    one name (a file's name is its stem)."""
    from tvm_transfer.cost_model import LEARNED_COST_MODELS

    untrainable = [name for name in models if name not in LEARNED_COST_MODELS]
    if untrainable:
        raise ValueError(
            f"cannot train {', '.join(untrainable)} on a dataset: the models that do are "
            f"{', '.join(LEARNED_COST_MODELS)}"
        )
    names = [*models, *(Path(file).stem for file in model_files)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"more than one model named {', '.join(repeated)}; a pack holds one model per name (a file's "
            "is its stem: rename the file)"
        )


def build_pack(
    work_dirs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    top_k: int | None = None,
    models: Sequence[str] = ("xgboost",),
    model_files: Sequence[str | os.PathLike] = (),
    exclude_networks: Sequence[str] = (),
    seed: int = 0,
    base: TransferPack | None = None,
    progress: Callable[[str], None] | None = None,
) -> TransferPack:
    """Build a pack at ``out`` from the MetaSchedule work dirs at or under ``work_dirs``, extending the pack
    ``base`` when given.

    The corpus is every record of them (:func:`tenset_tools.metaschedule.convert_databases`); the schedule
    database keeps the ``top_k`` fastest records of every workload on every target (``None``:
    :data:`~tvm_transfer.transfer.schedules.DEFAULT_TOP_K`, or the ``top_k`` of ``base``); ``models``
    names cost models (:data:`~tvm_transfer.cost_model.COST_MODELS` that train on datasets) trained on the
    corpus and ``model_files`` adds saved models as they are (each checked by loading it). The first model
    is the default. Work dirs whose sidecar names a network of ``exclude_networks`` (e.g. networks held out
    for evaluation), at any input shape or layout (:func:`~tvm_transfer.networks.network_family`), are
    left out; the manifest lists them. ``out`` must not exist or be an earlier pack
    (replaced only once the new one is complete; it may be ``base`` itself). ``progress`` receives one
    line per step.

    Extending ``base`` keeps its corpus and kept records beside the new ones (a measured candidate found in
    both counts once) and its excluded networks (which stay excluded); the models are trained anew on the
    whole corpus. Extending it with no work dirs changes only its models. Raises ``ValueError`` when
    ``base`` holds a network of ``exclude_networks``, when ``top_k`` exceeds the base's (its other tasks'
    records beyond its ``top_k`` are gone), when there are neither work dirs nor ``base``, and, before
    any work, for models it cannot pack (:func:`check_pack_models`).
    """
    from tenset_tools.metaschedule import convert_databases, databases_under, sidecar_network
    from tenset_tools.schema import add_normalised_throughput, merge_datasets, read_dataset
    from tvm_transfer.cost_model import load_cost_model, saved_model_class
    from tvm_transfer.cost_model.training import train_model
    from tvm_transfer.networks import network_family

    say = progress or (lambda _line: None)
    check_pack_models(models, model_files)
    out = Path(out)
    if out.exists() and not (out / MANIFEST_FILE).is_file():
        raise FileExistsError(f"{out} exists and is not a transfer pack; choose another -o")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"cannot write {out}: directory {out.parent} does not exist")
    default_top_k = DEFAULT_TOP_K
    if base is not None:
        excluded = {network_family(n) for n in exclude_networks}
        leaked = sorted(n for n in base.manifest.get("networks", []) if network_family(n) in excluded)
        if leaked:
            raise ValueError(
                f"{base.path} holds {', '.join(leaked)}: an extension of it cannot leave them out"
            )
        exclude_networks = sorted({*exclude_networks, *base.manifest.get("excluded_networks", [])})
        default_top_k = int(base.manifest.get("top_k", DEFAULT_TOP_K))
        if top_k is not None and top_k > default_top_k:
            raise ValueError(
                f"{base.path} keeps {default_top_k} records per task and target: an extension of it cannot "
                f"keep {top_k} (rebuild from all the work dirs without extending, or keep --top-k "
                f"{default_top_k})"
            )
    top_k = default_top_k if top_k is None else top_k
    sources = databases_under(list(work_dirs))  # a path without a database fails here, before any work
    excluded = {network_family(n) for n in exclude_networks}
    left_out = [s for s in sources if network_family(sidecar_network(s) or "") in excluded]
    sources = [s for s in sources if s not in left_out]
    if work_dirs and not sources:
        raise ValueError(f"every work dir under {', '.join(map(str, work_dirs))} is of an excluded network")
    if not work_dirs and base is None:
        raise ValueError("no work dirs and no base pack: give work dirs, or a base pack to change its models")
    temporary = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    temporary.mkdir()
    try:
        say(f"corpus: converting {len(sources)} work dir(s); {len(left_out)} of excluded networks left out")
        converted = temporary / f"new-{CORPUS_FILE}"
        new_records = convert_databases(sources, converted).records if sources else 0
        parts = [base.path / CORPUS_FILE] if base is not None else []
        corpus_records = merge_datasets(parts + ([converted] if sources else []), temporary / CORPUS_FILE)
        converted.unlink(missing_ok=True)
        say(f"corpus: {corpus_records} records ({new_records} converted)")
        base_schedules = base.schedules() if base is not None else None
        schedules = ScheduleDatabase.build(sources, temporary / SCHEDULES_DIR, top_k, base_schedules)
        say(f"schedules: {len(schedules.entries)} records of {schedules.workload_count} workloads")
        (temporary / MODELS_DIR).mkdir()
        names: dict[str, str] = {}
        if models:
            frame = add_normalised_throughput(read_dataset(temporary / CORPUS_FILE))
            for name in models:
                say(f"model {name}: training on {len(frame)} records")
                part = f"{MODELS_DIR}/{name}.model"
                train_model(frame, name, seed=seed).save(str(temporary / part))
                names[name] = part
        for file in model_files:
            file = Path(file)
            load_cost_model(file)  # refuse a file that is not a readable saved model before packing it
            name = file.stem
            part = f"{MODELS_DIR}/{name}.model"
            shutil.copyfile(file, temporary / part)
            names[name] = part
            say(f"model {name}: {saved_model_class(file)} from {file}")
        for name in sorted(set(base.model_names) - set(names)) if base is not None else []:
            say(f"model {name} of {base.path} is not carried over: pass its file with --model to keep it")
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "tvm_version": tvm.__version__,
            "package_commit": package_commit(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "targets": schedules.targets,
            "networks": schedules.networks,
            "records": {
                "corpus": corpus_records,
                "schedules": len(schedules.entries),
                "workloads": schedules.workload_count,
            },
            "top_k": top_k,
            "models": names,
            "default_model": next(iter(names), None),
            "sources": list(
                dict.fromkeys([*(base.manifest.get("sources", []) if base else []), *map(str, sources)])
            ),
            "extends": _base_facts(base) if base else None,
            "excluded_networks": sorted(set(exclude_networks)),
            "parts": part_checksums(temporary),
        }
        atomic_write_text(temporary / MANIFEST_FILE, json.dumps(manifest, indent=1))
        _replace_folder(temporary, out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return TransferPack.open(out)


def _base_facts(base: TransferPack) -> dict:
    """What an extension's manifest says of its base: when and from which commit it was built."""
    return {"created": base.manifest["created"], "package_commit": base.manifest.get("package_commit")}


def _replace_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out``; an earlier pack there is moved aside first and removed after."""
    if not out.exists():
        os.replace(new, out)
        return
    old = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.old"
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
