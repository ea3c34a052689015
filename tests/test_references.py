"""Every public package star-imports, and every cross-reference in the package's docstrings
and comments (``:mod:``, ``:class:``, ``:func:``, ``:meth:``, ``:data:``, ``:attr:``,
``:exc:``) names something that exists.

References into the package are resolved from the source with ``ast`` (no module is
imported, so the TensorFlow converter is read like the rest); references outside it
(``jax.Array``, ``optax.lars``), and names a package loads on first use, by importing them. A name is found in a module's top-level
definitions, assignments and imports (followed to the module they come from), and in the
methods, attributes and fields of its classes. A target without a dot or with a leading
dot is looked up as Sphinx does: in the referring module, its classes and its package.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache

import pytest

from tests.test_imports import PACKAGE, _modules

#: The packages a user imports; each must star-import.
PUBLIC_PACKAGES = (
    "contrastive_jax", "contrastive_jax.losses", "contrastive_jax.metrics",
    "contrastive_jax.models", "contrastive_jax.data", "contrastive_jax.eval",
    "contrastive_jax.train", "contrastive_jax.configs",
)

ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc|obj):`(?:[^`<]*<)?~?([^`<>]+?)>?`")
MODULES = _modules()


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_package_star_imports(package):
    namespace: dict = {}
    exec(f"from {package} import *", namespace)  # noqa: S102 - the statement under test
    declared = getattr(importlib.import_module(package), "__all__", None)
    if declared is not None:
        assert sorted(set(declared) - set(namespace)) == []


@cache
def _names(module: str) -> dict[str, object]:
    """Top-level names of ``module`` -> an ``ast.ClassDef``, the module an import names it
    from (a str), or None for any other definition."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    is_package = MODULES[module].name == "__init__.py"
    names: dict[str, object] = {}
    for node in _top_level(tree.body):
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def _top_level(body):
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body + [s for h in node.handlers for s in h.body])


def _class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
        elif isinstance(item, ast.Assign):
            members.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) \
                and item.value.id == "self":
            members.add(item.attr)
    return members


def _exists(path: str, depth: int = 0) -> bool:
    """Whether the dotted ``path`` names a module, or something defined in one."""
    if path in MODULES:
        return True
    parts = path.split(".")
    if parts[0] != "contrastive_jax":
        return _imports(path)
    for i in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:i])
        if module not in MODULES:
            continue
        rest = parts[i:]
        found = _names(module).get(rest[0], KeyError)
        if found is KeyError:  # not defined at the top level: look for it on the imported module
            return _imports(path)
        if isinstance(found, str):  # imported: follow it to where it is defined
            return depth < 8 and _exists(".".join([found, *rest[1:]]), depth + 1)
        if len(rest) == 1:
            return True
        if isinstance(found, ast.ClassDef):
            return len(rest) == 2 and rest[1] in _class_members(found)
        return False
    return False


def _imports(path: str) -> bool:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                value = getattr(value, part)
        except AttributeError:
            return False
        return True
    return False


def _resolves(target: str, module: str) -> bool:
    target = target.strip().removesuffix("()")
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    if target.startswith("."):
        stripped = target.lstrip(".")
        up = len(target) - len(stripped) - 1
        base = package.rsplit(".", up)[0] if up else package
        return _exists(f"{base}.{stripped}") or _exists(f"{module}.{stripped}")
    if target.startswith("contrastive_jax") or "." in target and _exists(target):
        return _exists(target)
    local = [f"{module}.{target}", f"{package}.{target}"]
    local += [f"{module}.{name}.{target}" for name, node in _names(module).items()
              if isinstance(node, ast.ClassDef)]
    return any(_exists(c) for c in local) or _imports(f"builtins.{target}") or _imports(target)


def test_every_docstring_reference_names_something_that_exists():
    dangling = []
    for module, path in sorted(MODULES.items()):
        source = path.read_text(encoding="utf-8")
        for match in ROLE.finditer(source):
            if not _resolves(match.group(1), module):
                line = source.count("\n", 0, match.start()) + 1
                dangling.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {match.group(0)}")
    assert dangling == []


@pytest.mark.parametrize("reference, module, exists", [
    (".host_views", "contrastive_jax.data.records", True),
    (".augment", "contrastive_jax.data.augment_config", False),
    ("contrastive_jax.data.RecordSet.read", "contrastive_jax.losses", True),
    ("contrastive_jax.data.RecordSet.write", "contrastive_jax.losses", False),
    ("RecordSet.locate", "contrastive_jax.data.records", True),
    ("_global_sum", "contrastive_jax.losses._two_tower", False),
    ("optax.lars", "contrastive_jax.train.optim", True),
    ("optax.not_a_function", "contrastive_jax.train.optim", False),
])
def test_the_resolver_finds_what_exists_and_only_that(reference, module, exists):
    assert _resolves(reference, module) is exists
