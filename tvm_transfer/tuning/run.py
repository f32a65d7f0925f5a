"""One network run, resolved once: :class:`RunConfig` (what the run is) and :class:`NetworkRun` (its work dir
checked and prepared, its tasks extracted), which tuning (:func:`~tvm_transfer.tuning.network.tune_network`)
and compiling (:func:`~tvm_transfer.tuning.compile.compile_network`) share.

The command line makes one ``RunConfig`` from its options; a library caller makes one with
:meth:`RunConfig.make`. Nothing below re-resolves the model, the target, the work dir or the transfer
plan, and a work dir is checked and prepared (its tasks named, its settings recorded, a pack's exact
matches applied) once per ``NetworkRun``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.networks import (
    LoadedModel,
    fused_for_extraction,
    load_model,
    relax_module,
    weights_outgrow_cache,
)
from tvm_transfer.target import as_target
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.workdir import AppliedTask, WorkDir, WorkDirSettings

__all__ = ["MEASURE_CACHES", "NetworkRun", "RunConfig", "extract_network_tasks", "resolve_measure_caches"]

#: How a network's candidates may be timed (:attr:`RunConfig.measure_caches`; ``auto`` is resolved when the
#: config is made).
MEASURE_CACHES = ("warm", "cold", "auto")
#: What a run neither given nor recorded in its work dir uses: layout rewrite on, candidates timed warm.
_DEFAULT_SETTINGS = WorkDirSettings(layout_free=True, measure_caches="warm")


@dataclass(frozen=True)
class RunConfig:
    """Everything a network run is, resolved: the model, the target, the work dir, the tuning plan (cost
    model, search, transfer pack), the search options, and the settings a work dir records.

    ``layout_free`` lets schedules re-lay out the weights (the rewrite runs once at build time);
    ``measure_caches`` is ``"warm"`` (candidates timed back to back, as MetaSchedule's runner does) or
    ``"cold"`` (the CPU caches flushed of a candidate's arguments but its input before every run, as a
    layer of a network whose weights outgrow the cache finds them)."""

    model: LoadedModel
    work_dir: WorkDir
    target: tvm.target.Target
    options: TuneOptions = field(default_factory=TuneOptions)
    plan: TuningPlan = field(default_factory=TuningPlan)
    layout_free: bool = True
    measure_caches: str = "warm"

    @classmethod
    def make(
        cls,
        model: str | LoadedModel,
        work_dir: str | os.PathLike,
        *,
        target: tvm.target.Target | dict | None = None,
        options: TuneOptions | None = None,
        plan: TuningPlan | None = None,
        layout_free: bool | None = None,
        measure_caches: str | None = None,
    ) -> RunConfig:
        """A config from a caller's values: ``model`` a name for :func:`~tvm_transfer.networks.load_model`
        or a loaded model, ``target`` as :func:`~tvm_transfer.target.as_target` takes it (default: the
        host), ``measure_caches`` one of :data:`MEASURE_CACHES` (:func:`resolve_measure_caches`).
        ``layout_free`` and ``measure_caches`` left ``None`` take what the work dir recorded, else
        ``True`` and ``"warm"``; given, they must agree with it (:class:`NetworkRun` checks). Raises
        ``ValueError`` for an unknown ``measure_caches``."""
        model = load_model(model) if isinstance(model, str) else model
        work_dir = work_dir if isinstance(work_dir, WorkDir) else WorkDir(work_dir)
        said = WorkDirSettings(None, layout_free, measure_caches).merged(work_dir.settings())
        said = said.merged(_DEFAULT_SETTINGS)
        return cls(
            model=model,
            work_dir=work_dir,
            target=as_target(target),
            options=options or TuneOptions(),
            plan=plan or TuningPlan(),
            layout_free=said.layout_free,
            measure_caches=resolve_measure_caches(said.measure_caches, model),
        )

    @property
    def settings(self) -> WorkDirSettings:
        """What the work dir records of this run (:class:`~tvm_transfer.tuning.workdir.WorkDirSettings`)."""
        return WorkDirSettings(self.model.name, self.layout_free, self.measure_caches)


def resolve_measure_caches(measure_caches: str, model: LoadedModel, *, cache_bytes: int | None = None) -> str:
    """``warm`` or ``cold``, as ``measure_caches`` (one of :data:`MEASURE_CACHES`) says for ``model`` on this
    machine: ``auto`` is ``cold`` when the model's weights outgrow the last-level cache
    (:func:`~tvm_transfer.networks.weights_outgrow_cache`, ``cache_bytes`` bytes as there). Raises
    ``ValueError`` for another value."""
    if measure_caches not in MEASURE_CACHES:
        raise ValueError(f"unknown measure_caches {measure_caches!r}: use one of {', '.join(MEASURE_CACHES)}")
    if measure_caches != "auto":
        return measure_caches
    return "cold" if weights_outgrow_cache(relax_module(model), cache_bytes=cache_bytes) else "warm"


def extract_network_tasks(
    model: str | LoadedModel, target: tvm.target.Target, layout_free: bool = True
) -> list[ms.ExtractedTask]:
    """The MetaSchedule tasks (``ExtractedTask``: name, module, weight) of ``model`` (a name for
    :func:`~tvm_transfer.networks.load_model`, or a loaded model), extracted as a build looks them up."""
    model = load_model(model) if isinstance(model, str) else model
    mod = fused_for_extraction(relax_module(model), target, layout_free)
    return list(ms.relax_integration.extract_tasks(mod, target))


class NetworkRun:
    """A :class:`RunConfig` whose work dir is checked and prepared, with the network's tasks extracted once.

    Making one raises :class:`~tvm_transfer.tuning.workdir.WorkDirMismatchError` (a ``ValueError``) when
    the work dir was tuned with other settings or for another target; then it names the tasks in the work
    dir, records the run's network and layout rewrite there and applies the plan's transfer pack
    (``applied``: ``{task index: AppliedTask}``). ``tasks`` restricts the run to some of the network's
    tasks (default: all)."""

    def __init__(self, config: RunConfig, tasks: Sequence[ms.ExtractedTask] | None = None) -> None:
        self.config = config
        work_dir = config.work_dir
        work_dir.check(config.settings, config.target)
        self.tasks: list[ms.ExtractedTask] = (
            list(tasks)
            if tasks is not None
            else list(ms.relax_integration.extract_tasks(self.fused_module, config.target))
        )
        work_dir.name_tasks(config.model.name, self.tasks)
        # How candidates are timed is recorded by the run that measures first (tune_network), not a build.
        work_dir.record_settings(replace(config.settings, measure_caches=None))
        pack = config.plan.pack_schedules
        self.applied: dict[int, AppliedTask] = (
            pack.apply(self.task_pairs, config.target, work_dir) if pack is not None else {}
        )

    @property
    def task_pairs(self) -> list[tuple[str, tvm.IRModule]]:
        """``(name, module)`` of each task, as a pack's schedules are looked up."""
        return [(task.task_name, task.dispatched[0]) for task in self.tasks]

    @cached_property
    def fused_module(self) -> tvm.IRModule:
        """The model's Relax module fused as the tasks are extracted from it (and a build looks them up)."""
        config = self.config
        return fused_for_extraction(relax_module(config.model), config.target, config.layout_free)
