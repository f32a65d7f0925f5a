"""The layering the README promises: no import cycle between modules of the package, none between folders
of ``tvm_transfer`` or of ``vta_ext``, and the data layer (``tenset_tools``) and the accelerator
(``vta_ext``) never import ``tvm_transfer``.

Every import statement counts, lazy ones inside functions and type-only ones under ``if TYPE_CHECKING:``
included: a module that needs another's types for its annotations is tied to it as much as one that calls
it, so two modules that name each other in either way form a cycle.

Folders are packages (directories with an ``__init__.py``, at any depth). A module belongs to the folder
it sits in, a package's ``__init__.py`` to the package's own folder; folder A depends on folder B when a
module of A imports a module of B. A parent and its child folder are two folders like any other: the
parent's ``__init__.py`` may re-export its subpackages (parent -> child), but then nothing in the child
may import from the parent's own modules (child -> parent), or the two import each other. Neither
exempting nested folders nor merging a child into its parent would match "no two folders import each
other": both would hide exactly the cycle of a child importing ``parent.base`` while the parent imports
the child. The implicit import of a parent ``__init__.py`` that Python does before any child module is not
an edge; counting it would forbid a parent from ever importing its children.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tvm_transfer", "tenset_tools", "vta_ext")
FOLDER_PACKAGES = ("tvm_transfer", "vta_ext")

# node -> {node it imports: [(file, line) of each import statement that makes the edge]}
Graph = dict[str, dict[str, list[tuple[str, int]]]]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """Modules of the three packages that ``path`` imports anywhere (lazy and type-only imports included),
    with ``from package import submodule`` resolved to the submodule, each with where it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, list[tuple[str, int]]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for module in names:
            if module in modules and module != name:
                found.setdefault(module, []).append((str(path.relative_to(ROOT)), node.lineno))
    return {module: sorted(set(where)) for module, where in found.items()}


def _folders(graph: Graph, modules: dict[str, Path]) -> Graph:
    """The folder graph of ``FOLDER_PACKAGES``: an edge A -> B for every module of A importing one of B."""
    folder = {m: m if p.name == "__init__.py" else m.rpartition(".")[0] for m, p in modules.items()}
    folders: Graph = {folder[m]: {} for m in modules if m.split(".")[0] in FOLDER_PACKAGES}
    for module, deps in graph.items():
        for dep, where in deps.items():
            a, b = folder[module], folder[dep]
            if a != b and a in folders and b in folders:
                folders[a].setdefault(b, []).extend(where)
    return {a: {b: sorted(where) for b, where in deps.items()} for a, deps in folders.items()}


def _cycles(graph: Graph) -> list[str]:
    """Tarjan's strongly connected components: each component of more than one node is a cycle, given as
    its nodes and then every edge inside it with the import statements that make the edge."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                members = sorted([node, *component])
                edges = [
                    f"  {a} -> {b}: {', '.join(f'{file}:{line}' for file, line in graph[a][b])}"
                    for a in members for b in sorted(graph[a]) if b in members
                ]  # fmt: skip
                cycles.append("\n".join([" <-> ".join(members), *edges]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return _modules()


@pytest.fixture(scope="module")
def graph(modules) -> Graph:
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_lower_layers_never_import_tvm_transfer(graph):
    upward = sorted(
        f"{m} -> {d}" for m, deps in graph.items() if not m.startswith("tvm_transfer") for d in deps
        if d.startswith("tvm_transfer")
    )  # fmt: skip
    assert upward == []


def test_no_two_modules_import_each_other(graph):
    cycles = _cycles(graph)
    assert not cycles, "\n".join(cycles)


def test_no_two_folders_import_each_other(graph, modules):
    cycles = _cycles(_folders(graph, modules))
    assert not cycles, "\n".join(cycles)
