"""The package's layers point one way, and no module-level import closes a cycle.

The layers (lowest first) are the table of `docs/architecture.md`; a module may
import from its own layer and the ones below. Every import is read from the
source with `ast`, function-local ones included (a function-local import is no
licence to point up a layer). Cycles are looked for among module-level imports,
counting that importing `a.b.c` runs `a/__init__` and `a/b/__init__` first.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PACKAGE = "progenax"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "core",
        (
            "_version",
            "_deprecation",
            "_types",
            "_fusion",
            "units",
            "validation",
            "sampling",
            "_sort",
            "_mesh",
            "_compile",
            "_forward_mode",
            "_allocator",
        ),
    ),
    ("models, imf", ("models", "profiles", "kinematics", "imf")),
    ("neighbours", ("neighbours",)),
    ("diagnostics", ("diagnostics",)),
    ("state", ("state",)),
    ("structure", ("structure",)),
    ("binaries", ("binaries",)),
    ("builders", ("builders", "gravoturb")),
    ("sph", ("sph",)),
    ("sharding", ("sharding",)),
    ("infer, io, plotting", ("infer", "io", "plotting")),
    ("audit, cli", ("audit", "cli", "__init__")),
]

# Function-local imports that are allowed to point up: each with its reason.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    if module == PACKAGE:
        return len(LAYERS) - 1
    first = module.split(".")[1]
    for index, (_, names) in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py (and docs/architecture.md)")


def _resolve(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The progenax modules an import statement in `module` loads."""
    is_package = MODULES[module].name == "__init__.py"
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
    if node.level == 0:
        base = node.module or ""
        if base.split(".")[0] != PACKAGE:
            return []
    else:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        targets.append(candidate if candidate in MODULES else base)
    return targets


def _with_parents(target: str, importer: str) -> list[str]:
    """`target` and the packages above it that importing it initialises (not the
    importer's own packages, which are already being initialised)."""
    parts = target.split(".")
    chain = [".".join(parts[:k]) for k in range(2, len(parts) + 1)]
    return [p for p in chain if p == target or not importer.startswith(p + ".")]


def _imports(top_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        edges = set()
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, node):
                    edges.update(t for t in _with_parents(target, module) if t != module and t in MODULES)
        graph[module] = edges
    return graph


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_points_up_a_layer():
    upward = []
    for module, targets in _imports(top_level_only=False).items():
        for target in sorted(targets):
            if layer_of(target) > layer_of(module) and (module, target) not in ALLOWED_UPWARD:
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports pointing up a layer:\n" + "\n".join(upward)


def test_no_import_cycle():
    graph = _imports(top_level_only=True)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_table_orders_the_house():
    # What the tests above rely on: a builder sits above the models it composes,
    # the command line above everything.
    assert layer_of("progenax.models._base") < layer_of("progenax.builders.plummer") < layer_of("progenax.cli")
    assert layer_of("progenax.neighbours.cells") < layer_of("progenax.sph.density")
