"""Command-line pieces of copula transfer: ``tune --seed-from`` and ``tune-network --seed-from`` options (the
copula strategy and, for ``tune``, an optional cost model pretrained on the same runs) and the ``budget``
command.

Used by :mod:`tvm_transfer.cli`, which hands :func:`budget_command` its target options and resolver.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from tenset_tools.command import Command, UsageError, bounded_float, bounded_int, refuse_unused
from tvm_transfer.search_strategy.copula.copula import DISTRIBUTIONS, ORDERS

if TYPE_CHECKING:
    from tvm.target import Target


#: The defaults of the copula options (the paper's: 0.3, truncated_gaussian, sampling order).
QUANTILE, DISTRIBUTION, ORDER = 0.1, "gaussian_kde", "density"


def add_copula_arguments(parser: argparse.ArgumentParser, network: bool = False) -> None:
    """``--seed-from`` and friends on the ``tune`` command (``network``: on ``tune-network``, where every
    task gets its own copula-seeded search and the operator-only flags are left out)."""
    group = parser.add_argument_group("copula transfer (Randall et al., ICS'23)")
    group.add_argument(
        "--seed-from",
        nargs="+",
        metavar="DIR",
        help=(
            "earlier tuning runs (work dirs, or folders holding them, e.g. `tenset-tools collect`'s output) "
            "of other networks or shapes: each task's search starts from the best schedules of the source "
            "tasks with its design space, then copula samples conditioned on its shape"
            if network
            else "work dirs of earlier tuning runs of the same operator kind (other shapes), or folders "
            "holding them: seed the search with copula samples conditioned on this shape"
        ),
    )
    group.add_argument(
        "--copula-quantile",
        type=bounded_float(0.0, 1.0, open_minimum=True),
        default=QUANTILE,
        help="best share of each source task kept (default %(default)s; the paper: 0.3)",
    )
    group.add_argument(
        "--copula-distribution",
        choices=list(DISTRIBUTIONS),
        default=DISTRIBUTION,
        help="marginals of the copula columns (default %(default)s; the paper: truncated_gaussian)",
    )
    group.add_argument(
        "--copula-order",
        choices=ORDERS,
        default=ORDER,
        help="proposal order: the conditional centre first, then by copula density (default); the centre, "
        "then most often generated; most often generated first; or sampling order (the paper)",
    )
    group.add_argument(
        "--no-copula-anchors",
        dest="copula_anchors",
        action="store_false",
        help="propose copula draws only (the paper); by default the sources' kept configurations, repaired "
        "to this shape, come first",
    )
    group.add_argument(
        "--rank-pool",
        type=bounded_int(0),
        metavar="N",
        help="the cost model chooses the first batch from the copula's first N candidates (default: one "
        "batch with --pretrain-on-sources or --model-file, else 0: the copula's order); the rest join the "
        "evolution's population",
    )
    if network:
        return
    group.add_argument(
        "--pretrain-on-sources",
        action="store_true",
        help="train the cost model on every record of the --seed-from runs before tuning, and measure the "
        "copula's first batch in that model's order",
    )
    group.add_argument(
        "--few-shot", action="store_true", help="only measure the copula samples (up to --trials), in order"
    )


#: The options that shape a copula search from ``--seed-from``'s runs, with their defaults.
_SOURCE_OPTIONS = {
    "--copula-quantile": ("copula_quantile", QUANTILE),
    "--copula-distribution": ("copula_distribution", DISTRIBUTION),
    "--copula-order": ("copula_order", ORDER),
    "--no-copula-anchors": ("copula_anchors", True),
    "--rank-pool": ("rank_pool", None),
    "--few-shot": ("few_shot", False),
}


def check_copula_arguments(args: argparse.Namespace) -> None:
    """Raise :class:`~tenset_tools.command.UsageError` naming the copula options given without
    ``--seed-from``, which nothing would read."""
    if not getattr(args, "seed_from", None):
        refuse_unused(args, _SOURCE_OPTIONS, "give --seed-from DIR [DIR ...]")


def _source_dirs(paths: list[str]) -> list:
    """The MetaSchedule work dirs at or under each ``--seed-from`` path; a path without any ends the
    command with its name."""
    from tenset_tools.metaschedule import databases_under

    try:
        return databases_under(paths)
    except FileNotFoundError as error:
        raise UsageError(f"--seed-from: {error}") from error


def _sampler(args: argparse.Namespace, exclude=None):
    from tvm_transfer.search_strategy.copula import TraceCopulaSampler, load_sources

    records = load_sources(_source_dirs(args.seed_from), exclude=exclude)
    return TraceCopulaSampler(
        quantile=args.copula_quantile,
        distribution=args.copula_distribution,
        order=args.copula_order,
        anchors=getattr(args, "copula_anchors", True),
    ).fit(records)


def _need_seed_from(args: argparse.Namespace, flag: str) -> None:
    if not getattr(args, "seed_from", None):
        raise UsageError(f"{flag} needs --seed-from DIR [DIR ...]")


def copula_cost_model(args: argparse.Namespace, workload, cost_model, seed: int):
    """``cost_model`` (a name or a model), with ``--pretrain-on-sources`` trained on the ``--seed-from`` runs
    first (the target shape's own records left out)."""
    if not getattr(args, "pretrain_on_sources", False):
        return cost_model
    _need_seed_from(args, "--pretrain-on-sources")
    from tvm_transfer.cost_model import make_cost_model
    from tvm_transfer.search_strategy.copula import pretrain_on_sources

    model = make_cost_model(cost_model, seed=seed) if isinstance(cost_model, str) else cost_model
    return pretrain_on_sources(model, _source_dirs(args.seed_from), exclude=workload.ir_module())


def _rank_pool(args: argparse.Namespace, options) -> int:
    """``--rank-pool``; by default one batch when the cost model knows the operator already (pretrained on
    the sources or loaded from a file), else 0 (the copula's order)."""
    if args.rank_pool is not None:
        return args.rank_pool
    trained = getattr(args, "pretrain_on_sources", False) or getattr(args, "model_file", None)
    return options.trials_per_iter if trained else 0


def copula_strategy(args: argparse.Namespace, options, exclude=None):
    """The ``CopulaSearch`` the ``tune`` / ``tune-network`` options ask for (never re-measuring what the
    work dir holds), or ``None`` without ``--seed-from``; ``exclude``: a task whose own source records are
    left out (``tune``: the operator)."""
    if not getattr(args, "seed_from", None):
        return None
    from tvm_transfer.search_strategy.copula import CopulaSearch
    from tvm_transfer.tuning.session import evolution_settings, skip_measured

    sampler = _sampler(args, exclude)
    return skip_measured(
        CopulaSearch(
            sampler,
            few_shot=getattr(args, "few_shot", False),
            seed=options.seed,
            rank_pool=_rank_pool(args, options),
            **evolution_settings(options.population_size),
        )
    )


def _run_budget(args: argparse.Namespace, resolve_target: Callable[[argparse.Namespace], Target]) -> int:
    from tvm_transfer.builder import import_tensor_intrin_fast
    from tvm_transfer.search_strategy.copula.population import design_spaces
    from tvm_transfer.workloads import parse_workload

    import_tensor_intrin_fast()
    workload = parse_workload(args.kind, args.shape)
    target = resolve_target(args)
    sampler = _sampler(args, workload.ir_module())
    mod, spaces, postprocs = design_spaces(workload, target)
    estimate = sampler.budget(
        mod,
        target,
        spaces,
        postprocs,
        success_bar=args.success_bar,
        max_draws=args.max_draws,
    )
    print(f"{workload.name}: few-shot budget {estimate.budget} evaluations")
    print(f"  P(at least one ideal configuration) = {estimate.probability:.3f} >= {estimate.success_bar}")
    print(f"  space size |S| = {estimate.space_size}")
    print(f"  unique copula samples C = {estimate.unique_generated}, estimated ideal I = {estimate.ideal}")
    return 0


def _add_budget_arguments(
    parser: argparse.ArgumentParser, add_target_arguments: Callable[[argparse.ArgumentParser], None]
) -> None:
    from tvm_transfer.workloads import SHAPE_PARAMS

    parser.add_argument("kind", choices=list(SHAPE_PARAMS))
    parser.add_argument("--shape", help="comma-separated shape values")
    parser.add_argument("--seed-from", nargs="+", required=True, metavar="DIR", help="source work dirs")
    parser.add_argument(
        "--copula-quantile", type=bounded_float(0.0, 1.0, open_minimum=True), default=QUANTILE
    )
    parser.add_argument("--copula-distribution", default=DISTRIBUTION, choices=list(DISTRIBUTIONS))
    parser.add_argument("--copula-order", default=ORDER, choices=ORDERS)
    parser.add_argument(
        "--success-bar", type=bounded_float(0.0, 1.0), default=0.5, help="default 0.5 (the paper's)"
    )
    parser.add_argument(
        "--max-draws", type=bounded_int(1), default=4096, help="copula draws to count C (default 4096)"
    )
    add_target_arguments(parser)


def budget_command(
    add_target_arguments: Callable[[argparse.ArgumentParser], None],
    resolve_target: Callable[[argparse.Namespace], Target],
) -> Command:
    """The ``budget`` command of ``tvm-transfer``, with the command line's target options
    (``add_target_arguments``) and the function turning them into a TVM target (``resolve_target``)."""
    return Command(
        "budget",
        "few-shot budget of copula transfer for a new shape (Randall et al.'s hypergeometric rule)",
        partial(_add_budget_arguments, add_target_arguments=add_target_arguments),
        partial(_run_budget, resolve_target=resolve_target),
        description=None,
    )
