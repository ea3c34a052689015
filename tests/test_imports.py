"""The package's imports run one way: no module imports, through others, a module that imports it.

Edges are the module-level imports of each module (those under ``if TYPE_CHECKING:``
included, imports inside functions not), read from the source with ``ast``; ``from pkg
import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "contrastive_jax"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _module_level(body: list[ast.stmt]):
    """The import statements of a module body, descending into if/try blocks only."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(
                node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
            )


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in _module_level(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first = last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_circle():
    cycle = find_cycle(import_graph(_modules()))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_checker_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _imports_in_functions(tree: ast.AST) -> set[str]:
    """The package modules a source file imports inside its functions (absolute imports)."""
    names: set[str] = set()
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module:
                    names.add(node.module)
                elif isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
    return {name for name in names if name.split(".")[0] == "contrastive_jax"}


#: The one module that imports some of the package inside functions, and why: ``pretrain``
#: parses its flags (and answers ``--help``, ``--print_config``, ``--dry_run``) before the
#: trainer loads, and imports the loop only after ``jax.distributed.initialize``.
DEFERRED = {"contrastive_jax.pretrain"}


def test_modules_import_the_package_at_the_top():
    """No module of the package but :data:`DEFERRED` imports one of the package inside a function
    (a circle held shut that way is invisible to the test above); imports inside functions are
    left to optional packages (tensorboardX, wandb, TensorFlow in the converter)."""
    inside = {name: found for name, path in _modules().items()
              if name not in DEFERRED
              and (found := _imports_in_functions(ast.parse(path.read_text(encoding="utf-8"))))}
    assert inside == {}


def test_the_trainer_modules_import_as_drawn():
    """The circle train/ once had stays broken: the modules below the loop do not import it,
    what the step needs of a transfer reads no checkpoint, and no trainer module imports the
    sizing tools built on it."""
    graph = import_graph(_modules())
    assert "contrastive_jax.train.loop" not in graph["contrastive_jax.train.pretrained"]
    assert graph["contrastive_jax.train.transfer"] <= {"contrastive_jax.errors"}
    sizing = {name for name in graph if name.startswith("contrastive_jax.sizing")}
    assert sizing and {name: graph[name] & sizing for name in graph
                       if name.startswith("contrastive_jax.train")
                       and graph[name] & sizing} == {}


def test_the_evaluators_sit_below_the_trainer():
    """The loop runs the evaluators, so no module of eval/ imports train/ but the one that
    restores a checkpoint (``eval/checkpoint.py``) and the protocol's annotation of the run's
    sections (``RunSpec``, under ``TYPE_CHECKING``)."""
    graph = import_graph(_modules())
    reaches = {name: sorted(t for t in graph[name] if t.startswith("contrastive_jax.train"))
               for name in graph if name.startswith("contrastive_jax.eval")}
    assert {name: found for name, found in reaches.items() if found} == {
        "contrastive_jax.eval.checkpoint": ["contrastive_jax.train.paths",
                                            "contrastive_jax.train.pretrained",
                                            "contrastive_jax.train.spec"],
        "contrastive_jax.eval.evaluator": ["contrastive_jax.train.spec"],
    }
    assert "contrastive_jax.eval.registry" in graph["contrastive_jax.train.loop"]


def test_data_modules_import_as_drawn():
    """The two circles data/ once had stay broken: arrays imports vectors and not the
    reverse; records does not import base (base names RecordSet for its type)."""
    graph = import_graph(_modules())
    assert "contrastive_jax.data.arrays" not in graph["contrastive_jax.data.vectors"]
    assert "contrastive_jax.data.base" not in graph["contrastive_jax.data.records"]
    assert "contrastive_jax.data.vectors" in graph["contrastive_jax.data.arrays"]


def _all_imports(tree: ast.AST) -> set[str]:
    """Every module a source file imports, at any depth (functions included)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_only_the_converter_imports_tensorflow():
    """``pip install '.[train]'`` has no TensorFlow: no module but data/prepare.py imports it,
    even inside a function (TensorFlow Datasets, which reads without it, is another package)."""
    importers = sorted(
        name for name, path in _modules().items()
        if any(m.split(".")[0] == "tensorflow"
               for m in _all_imports(ast.parse(path.read_text(encoding="utf-8"))))
    )
    assert importers == ["contrastive_jax.data.prepare"]
