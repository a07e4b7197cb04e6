"""Imports go one way: no cycle between the modules of ``accel`` (function-level imports included, so a
cycle cannot hide inside a function), and no import against the layer order

    docs_gen -> cli -> sweep -> (report, gate) -> (results, record) -> (targets, features, engines, profile)
        -> (native, env) -> measure -> zoo -> (errors, data, yaml_bounds)

(a module may import its own layer or any layer below it). The graph is built from the source with
``ast``; an import of ``a.b.c`` depends on ``a.b.c`` and on the package ``a.b`` that Python runs first
(its ``__init__``), unless the importer is inside ``a.b``. ``from a.b import c`` also reads the package
``a.b``'s namespace, so it depends on ``a.b`` even from inside it (even when ``c`` is a submodule): a module
of a package imports its siblings by their full name (``from a.b.c import x``), never through the package.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "accel"
# Rank of each top-level module or package of accel: higher ranks import lower ones, never the reverse.
LAYERS = {
    "docs_gen": 10,
    "bytecode": 10,
    "__main__": 9,
    "cli": 9,
    "pytest_plugin": 9,
    "sweep": 8,
    "calibrate": 8,
    "tune": 8,
    "diverge": 8,
    "report": 7,
    "gate": 7,
    "results": 6,
    "record": 6,
    "targets": 5,
    "features": 5,
    "engines": 5,
    "profile": 5,
    "native": 4,
    "env": 4,
    "measure": 3,
    "outputs": 3,
    "calibration": 3,
    "zoo": 2,
    "errors": 1,
    "cpu_time": 1,
    "data": 1,
    "yaml_bounds": 1,
    "ranksup": 1,
    "raised_in": 1,
}
# Inside a package split by concern, the rank of each module: a module imports its own rank or lower, and never
# the package's own __init__ (ranked above them all, as "__init__") unless it ranks above that too.
# accel.gate: the vocabulary and the data files, then the limits and the evidence, then the verdicts, then their
# rendering; its __init__ re-exports every public name for the modules outside.
# accel.docs_gen: the markdown helpers, then one module per page family (the features page uses the profile
# page's option tables), then the __init__ with the list of pages and the staleness check, then ``-m``'s entry.
PACKAGE_LAYERS = {
    "accel.gate": {
        "verdict": 0,
        "data": 0,
        "limits": 1,
        "evidence": 1,
        "video": 2,
        "judge": 3,
        "render": 4,
        "__init__": 5,
    },
    "accel.docs_gen": {"markdown": 0, "profile": 1, "cli": 1, "api": 1, "features": 2, "__init__": 3, "__main__": 4},
}
# The package root is the public facade (``from accel import apply`` imports accel.features lazily).
FACADE = "accel"
# The functions that import a module named by a string (a constant, or a module-level name bound to one). Not
# counted: a registry's "accel.x:Class" entries (the target kinds', resolved by accel.targets.build when a target is
# built, as a plugin's entry point is: the registry itself imports nothing), "-m accel.x" commands and forkserver
# preloads (another process), and names computed at run time (f-strings).
IMPORTERS = ("import_module", "__import__")


def _importer_names(tree: ast.Module) -> set[str]:
    """The names a module calls the importers by: ``import_module``, ``__import__`` and any alias it binds
    (``from importlib import import_module as load``)."""
    names = set(IMPORTERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "importlib":
            names.update(alias.asname for alias in node.names if alias.name in IMPORTERS and alias.asname)
    return names


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module-level names bound to a string (``PRELOAD = "accel.x"``), which a call may pass instead."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _module_imported_by_name(
    call: ast.Call, importers: set[str], package: str, constants: dict[str, str] | None = None
) -> str | None:
    """The module of accel that ``import_module(...)`` or ``__import__(...)`` names, whatever the spelling: the
    owner (``importlib.import_module``, ``il.import_module``), an alias, the name as a keyword (``name=``) and a
    relative name against a constant package or the importer's own (``import_module(".cli", "accel")``,
    ``import_module(".cli", __package__)``). None when the call names no module of accel by a constant."""
    function = call.func
    called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    if called not in importers:
        return None
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    first = call.args[0] if call.args else keywords.get("name")
    if isinstance(first, ast.Name) and first.id in (constants or {}):
        name = (constants or {})[first.id]
    elif isinstance(first, ast.Constant) and isinstance(first.value, str):
        name = first.value
    else:
        return None
    if name.startswith("."):
        anchor = call.args[1] if len(call.args) > 1 else keywords.get("package")
        if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            base = anchor.value
        elif isinstance(anchor, ast.Name) and anchor.id in ("__package__", "__name__"):
            base = package
        else:
            return None
        name = importlib.util.resolve_name(name, base)
    return name if name.split(".")[0] == "accel" else None


# Installed into vLLM-Omni's own environment; it never imports accel.
SEPARATE = ("omni_cpu_platform",)


def modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in package.rglob("*.py"):
        if any(part in SEPARATE for part in path.parts):
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of accel -> the modules of accel it imports anywhere in its source (function bodies too)."""
    known = modules(package)

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, is_package) in known.items():
        tree = ast.parse(path.read_text(), str(path))
        importers, constants = _importer_names(tree), _string_constants(tree)
        own_package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names if alias.name.split(".")[0] == "accel"]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}".rstrip(".")
                if base.split(".")[0] != "accel":
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else resolve(base) for a in node.names]
                # ``from P import name`` reads the package P's namespace (its __init__), even when ``name`` is
                # a submodule and the importer sits inside P: while P is still initialising, what arrives
                # depends on the order of P's own imports. A dependency on P, never exempt.
                if base in known and known[base][1]:
                    targets.append(base)
            elif isinstance(node, ast.Call) and (
                named := _module_imported_by_name(node, importers, own_package, constants)
            ):
                # importlib.import_module("accel.x") / __import__("accel.x"): a function-level import by another
                # name, so a dependency all the same.
                targets = [resolve(named)]
            graph[name].update(t for t in targets if t and t != name)
    # Importing accel.x.y runs the package accel.x first (its __init__): a dependency too, unless the importer
    # is inside that package (then it is already being initialised).
    for name in graph:
        for target in list(graph[name]):
            package = target.rpartition(".")[0]
            while package.count("."):  # accel.x and deeper; not the facade "accel"
                if package in known and not (name == package or name.startswith(package + ".")):
                    graph[name].add(package)
                package = package.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else FACADE


def test_cycle_finder_finds_a_cycle():
    """The checker itself can fail: a three-module cycle and a self-contained pair are told apart."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_the_package_an_import_runs_first():
    graph = import_graph()
    assert "accel.features" in graph["accel.sweep.cell"]  # cell imports accel.features.*: runs its __init__
    assert "accel.features" not in graph["accel.features.cache"]  # inside the package: already initialising


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "accel.features.rules" in graph["accel.features.combinations"]  # imported inside a function


def test_a_cycle_through_a_function_level_import_of_the_own_package_is_found(tmp_path):
    """The shape of the zoo's old cycle, in a scratch copy: the package's __init__ imports a submodule that,
    inside a function, imports a sibling through the package (``from accel.zoo import world``)."""
    package = tmp_path / "accel"
    (package / "zoo").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "zoo" / "__init__.py").write_text("from accel.zoo import model\n")
    (package / "zoo" / "world.py").write_text("")
    (package / "zoo" / "model.py").write_text("def build():\n    from accel.zoo import world\n")
    assert cycles(import_graph(package)) == [["accel.zoo", "accel.zoo.model"]]
    # The sibling imported by its full name: no cycle.
    (package / "zoo" / "model.py").write_text("def build():\n    from accel.zoo.world import WORLD\n")
    assert cycles(import_graph(package)) == []


def test_a_cycle_through_an_import_by_name_is_found(tmp_path):
    """importlib.import_module("accel...") inside a function is an import too: a cycle through one is found (the
    hostile review's case: accel.data imports accel.errors, and a function of accel.errors imports accel.data by
    name)."""
    package = tmp_path / "accel"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text("from accel.errors import ConfigError\n")
    (package / "errors.py").write_text(
        "import importlib\n\ndef load():\n    return importlib.import_module('accel.data')\n"
    )
    assert cycles(import_graph(package)) == [["accel.data", "accel.errors"]]
    (package / "errors.py").write_text("def load():\n    return __import__('accel.data')\n")
    assert cycles(import_graph(package)) == [["accel.data", "accel.errors"]]
    (package / "errors.py").write_text("MESSAGE = 'see accel.data for the loader'\n")  # prose, not a module name
    assert cycles(import_graph(package)) == []


@pytest.mark.parametrize(
    "loader",
    [
        "import importlib\n\ndef load():\n    return importlib.import_module(name='accel.data')\n",
        "from importlib import import_module as _load\n\ndef load():\n    return _load('accel.data')\n",
        "import importlib as il\n\ndef load():\n    return il.import_module('.data', 'accel')\n",
        "import importlib\n\ndef load():\n    return importlib.import_module('.data', package=__package__)\n",
        "import importlib\n\ndef load():\n    return importlib.import_module('..data', 'accel.sub')\n",
        "import importlib\n\nLOADER = 'accel.data'\n\ndef load():\n    return importlib.import_module(LOADER)\n",
    ],
    ids=["keyword", "aliased", "relative-to-a-constant", "relative-to-its-own-package", "two-levels-up", "a-constant"],
)
def test_an_import_by_name_is_found_however_it_is_spelled(tmp_path, loader):
    """A keyword name, an alias of import_module and a relative name (against a constant package or the
    module's own) name a module all the same: the cycle through each is found (a hostile review's cases)."""
    package = tmp_path / "accel"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text("from accel.errors import ConfigError\n")
    (package / "errors.py").write_text(loader)
    assert cycles(import_graph(package)) == [["accel.data", "accel.errors"]]


def test_no_import_cycle_in_accel():
    found = cycles(import_graph())
    assert not found, "import cycles (move the shared piece down a layer): " + "; ".join(" <-> ".join(c) for c in found)


def test_every_module_has_a_layer():
    unknown = {layer(m) for m in import_graph()} - set(LAYERS) - {FACADE}
    assert not unknown, f"modules without a layer in tests/test_imports.py LAYERS: {sorted(unknown)}"


def test_imports_follow_the_layer_order():
    backward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if layer(module) != FACADE
        for target in targets
        if layer(target) != FACADE and LAYERS[layer(target)] > LAYERS[layer(module)]
    ]
    assert not backward, "imports against the layer order: " + "; ".join(sorted(backward))


def package_backward(graph: dict[str, set[str]], package: str, ranks: dict[str, int]) -> list[str]:
    """The imports inside ``package`` against its ``ranks`` (``"__init__"`` is the package itself)."""

    def rank(module: str) -> int:
        return ranks["__init__" if module == package else module.rpartition(".")[2]]

    inside = [m for m in sorted(graph) if m == package or m.startswith(package + ".")]
    return [
        f"{module} -> {target}"
        for module in inside
        for target in sorted(graph[module])
        if (target == package or target.startswith(package + ".")) and rank(target) > rank(module)
    ]


@pytest.mark.parametrize("package", sorted(PACKAGE_LAYERS))
def test_a_package_split_by_concern_imports_in_its_order(package):
    graph = import_graph()
    ranks = PACKAGE_LAYERS[package]
    inside = {
        "__init__" if m == package else m.rpartition(".")[2]
        for m in graph
        if m == package or m.startswith(package + ".")
    }
    assert inside == set(ranks), f"give each {package} module a rank in tests/test_imports.py PACKAGE_LAYERS"
    backward = package_backward(graph, package, ranks)
    assert not backward, f"imports against {package}'s order: " + "; ".join(backward)


def test_the_package_order_check_finds_a_page_that_reads_the_package():
    """A page module taking the header through the package (``from accel.docs_gen import HEADER``) is both a
    cycle (the package imports every page) and an import against the order; both checks say so."""
    graph = {name: set(targets) for name, targets in import_graph().items()}
    graph["accel.docs_gen.cli"].add("accel.docs_gen")
    assert package_backward(graph, "accel.docs_gen", PACKAGE_LAYERS["accel.docs_gen"]) == [
        "accel.docs_gen.cli -> accel.docs_gen"
    ]
    assert ["accel.docs_gen", "accel.docs_gen.cli"] in cycles(graph)


def test_the_module_map_states_the_layer_order_this_file_enforces():
    """The module map's intro sentence is written by hand in accel/docs_gen/api.py: it must say what LAYERS says."""
    from accel.docs_gen.api import modules_page

    levels = sorted(set(LAYERS.values()), reverse=True)
    groups = [[name for name, level in LAYERS.items() if level == rank] for rank in levels]
    order = " -> ".join(group[0] if len(group) == 1 else f"({', '.join(group)})" for group in groups)
    stated = "layer order `tests/test_imports.py` enforces (`LAYERS`, and `PACKAGE_LAYERS` inside a package split"
    assert f"{stated} by concern): {order}." in " ".join(modules_page().split())
