"""The path of ``tvm-transfer compile`` through the package's modules, traced: how many modules a command
visits, how often it moves from one module to another, and how often it comes back to a module it
already left.

The command runs in this process under :func:`sys.setprofile`. Every call from a function of the package
(``tvm_transfer``, ``tenset_tools``, ``vta_ext``) to a function of another module of the package is a
*stop*; each call site counts once, at its first call (a loop or a callback that TVM calls back per batch
is one stop), in the order the command first makes them. A stop into a module the path has left before is
a *revisit*: the measure of facts worked out again and checks made twice that a run resolved once keeps
low. Compare two trees side by side by running it from each (``PYTHONPATH=<tree>``)::

    python -m benchmarks.compile_path                        # compile mlp, 8 trials, no runtimes
    python -m benchmarks.compile_path --report-name compile_path -- compile torchvision:resnet18 --trials 0
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

PACKAGES = ("tvm_transfer", "tenset_tools", "vta_ext")
#: The modules that turn a command into a run (options, target, model, work dir, plan, tuning, build),
#: as opposed to what they call to do the work (cost models, searches, features): the path the summary's
#: ``run_*`` figures follow.
RUN_LAYER = (
    "tvm_transfer.cli",
    "tvm_transfer.tuning",
    "tvm_transfer.transfer.policy",
    "tvm_transfer.transfer.apply",
    "tvm_transfer.target",
    "tvm_transfer.networks",
    "tenset_tools.metaschedule",
)
DEFAULT_COMMAND = (
    "compile", "mlp", "--trials", "8", "--trials-per-iter", "4", "--population", "8",
    "--runtimes", "none", "--rounds", "1",
)  # fmt: skip
RESULTS = Path(__file__).parent / "results" / "architecture"


#: The facts a run resolves, and the functions (by module and name, in this tree or an older one) whose
#: every call resolves or checks one: a run that makes each once calls each of them once.
FACTS = {
    "target resolved": (("tvm_transfer.cli", "resolve_target"),),
    "tuning options built": (("tvm_transfer.cli", "_options"),),
    "work dir named": (("tvm_transfer.cli", "_work_dir"), ("tvm_transfer.tuning.workdir", "checked")),
    "transfer pack opened": (("tvm_transfer.transfer.pack", "open"),),
    "tasks extracted (modules fused)": (("tvm_transfer.networks.relax_import", "fused_for_extraction"),),
    "work dir checked for its target": (
        ("tvm_transfer.tuning.workdir", "check_work_dir_target"),
        ("tvm_transfer.tuning.workdir", "check_target"),
    ),
    "pack applied": (("tvm_transfer.transfer.apply", "apply_pack"), ("tvm_transfer.transfer.apply", "apply")),
    "work dir lock acquired": (("tvm_transfer.tuning.workdir", "_acquire"),),
}


def _ours(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in PACKAGES


def trace_command(argv: list[str]) -> tuple[list[tuple[str, str, str]], Counter]:
    """The stops of ``tvm-transfer`` run with ``argv`` (``(calling module, module, function)`` of each call
    site's first call into another module of the package, in order) and the calls of every function of
    the package, by ``(module, function)``."""
    from tvm_transfer.cli import main

    seen: set[tuple[str, str, str, str]] = set()
    stops: list[tuple[str, str, str]] = []
    calls: Counter = Counter()

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_globals.get("__name__"), frame.f_back.f_globals.get("__name__")
        if _ours(callee):
            calls[(callee, frame.f_code.co_name)] += 1
        if not (_ours(callee) and _ours(caller)) or callee == caller:
            return
        site = (caller, frame.f_back.f_code.co_name, callee, frame.f_code.co_name)
        if site not in seen:
            seen.add(site)
            stops.append((caller, callee, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        status = main(argv)
    finally:
        sys.setprofile(None)
    if status:
        raise SystemExit(f"the traced command failed with exit status {status}")
    return stops, calls


def summarise(stops: list[tuple[str, str]]) -> dict:
    """Stops, modules visited, and revisits (stops into a module the path had left, with the function
    entered) of a path."""
    visited: list[str] = []
    revisits: list[str] = []
    current = None
    for module, function in stops:
        if module == current:
            continue
        if module in visited:
            revisits.append(f"{module}.{function}")
        else:
            visited.append(module)
        current = module
    return {"stops": len(stops), "modules": len(visited), "revisits": revisits, "order": visited}


def _in_run_layer(module: str) -> bool:
    return module.startswith(RUN_LAYER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--report-name", help="also write results/architecture/NAME.json")
    parser.add_argument("command", nargs="*", help="the tvm-transfer arguments (default: %(default)s)")
    args = parser.parse_args(argv)
    command = list(args.command or DEFAULT_COMMAND)
    shown = list(command)
    with tempfile.TemporaryDirectory() as work_dir:
        if "--work-dir" not in command:
            command += ["--work-dir", work_dir]
        stops, calls = trace_command(command)
    layer = [(callee, f) for caller, callee, f in stops if _in_run_layer(caller) and _in_run_layer(callee)]
    summary = {"all": summarise([(callee, f) for _, callee, f in stops]), "run_layer": summarise(layer)}
    facts = {fact: sum(calls[f] for f in functions) for fact, functions in FACTS.items()}
    print(f"tvm-transfer {' '.join(shown)}")
    for fact, count in facts.items():
        print(f"{fact}: {count}x")
    for name, path in summary.items():
        print(f"{name}: {path['stops']} stops in {path['modules']} modules, {len(path['revisits'])} revisits")
    print("run layer, first-visit order: " + " -> ".join(summary["run_layer"]["order"]))
    print("run layer, revisits: " + ", ".join(summary["run_layer"]["revisits"]))
    if args.report_name:
        RESULTS.mkdir(parents=True, exist_ok=True)
        report = json.dumps({"command": shown, "facts": facts, **summary}, indent=1)
        (RESULTS / f"{args.report_name}.json").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
