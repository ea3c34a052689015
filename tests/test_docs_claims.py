"""What README.md, the pages of docs/, the benchmark README and the reproductions page tell a
reader to type exists in the code.

Checked against the sources and the default config, without running the tools:

* every ``python -m MODULE`` (or ``python experiments/.../SCRIPT.py``) names a module of this
  checkout, every ``make TARGET`` a target
  of the Makefile and every ``contrastive-jax-*`` command a console script of pyproject.toml;
* every ``--flag`` given to one of those commands is defined by it (absl ``DEFINE_*`` in the
  module's source, or ``add_argument`` in an ``experiments`` script and the helper it uses);
* every ``config.a.b`` field (``--config.a.b=...`` or named in the text) exists in
  ``contrastive_jax.train.config.default_config()``;
* every relative link resolves to a file;
* the Python examples of README.md and docs/index.md run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "experiments" / "bench" / "README.md",
    ROOT / "experiments" / "RESULTS.md",
]
#: Pages that other branches add; links to them may not resolve until those are merged.
PENDING_PAGES = {"docs/training.md", "docs/using-losses.md"}
#: Flags every absl/argparse tool accepts.
ALWAYS = {"help", "helpfull"}
#: Fields under which any key is allowed (free-form dictionaries).
FREE_FORM = {"loss.kwargs", "data.source_kwargs"}
#: Optional fields a config adds and the trainer reads (``contrastive_jax.train.objective``).
OPTIONAL = {"loss.mixing"}


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _code(text: str) -> str:
    """The code of a page: fenced and indented blocks and inline `code` spans, one per line."""
    parts = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    parts += re.findall(r"(?m)^(?: {4}|\t)(.*)$", text)
    parts += re.findall(r"`([^`\n]+)`", text)
    return "\n".join(parts)


def _commands(code: str) -> list[str]:
    """Shell commands of the code, continuation lines (``\\``) joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split(" #")[0] for line in joined.splitlines()]


def _module_path(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined_flags(module: str) -> set[str]:
    """Flags a ``python -m`` module defines (absl or argparse), from its source."""
    path = _module_path(module)
    sources = [_text(path)]
    if path is not None and path.name == "__main__.py":  # a package's main, in its __init__
        sources.append(_text(path.with_name("__init__.py")))
    if module.startswith("experiments.reproduce.") and "_common" in sources[0]:
        sources.append(_text(ROOT / "experiments" / "reproduce" / "_common.py"))
    for adopted in re.findall(r"adopt_module_key_flags\((\w+)\)", sources[0]):  # a tool's
        sources.append(_text(ROOT / "contrastive_jax" / f"{adopted}.py"))  # flags it takes on
    found = set(ALWAYS)
    for declared in re.findall(r"KEY_FLAGS = \(([^)]*)\)", sources[0]):  # another's it declares
        found |= set(re.findall(r"[\"'](\w+)[\"']", declared))
    for source in sources:
        found |= set(re.findall(r"DEFINE_\w+\(\s*[\"'](\w+)[\"']", source))
        found |= set(re.findall(r"add_argument\(\s*[\"']--([\w-]+)[\"']", source))
    return found


#: Console script -> the function of contrastive_jax._cli it runs ([project.scripts]).
SCRIPTS = dict(
    re.findall(r'(?m)^([\w-]+) = "contrastive_jax\._cli:(\w+)"', _text(ROOT / "pyproject.toml"))
)
#: Console script -> the module whose flags it takes (contrastive_jax._cli.<fn> runs <fn>'s main).
SCRIPT_MODULES = {name: f"contrastive_jax.{fn.replace('-', '_')}" for name, fn in SCRIPTS.items()}


def _own_arguments(rest: str) -> str:
    """The arguments before a lone ``--``: after it they go to the command the tool runs
    (``experiments.quickstart_seeds ... -- --config.seed=3``)."""
    return re.split(r"\s--(?=\s|$)", rest)[0]


def _invocations(path: Path) -> list[tuple[str, str, list[str]]]:
    """(kind, name, flags) for every command of a page: kind is module, make or script."""
    found = []
    for line in _commands(_code(_text(path))):
        for module, rest in re.findall(r"python3? -m ([\w.]+)([^;&|)]*)", line):
            found.append(("module", module, re.findall(r"--([\w-]+)", _own_arguments(rest))))
        for script, rest in re.findall(r"python3? ((?:experiments|contrastive_jax)/[\w/]+)\.py"
                                       r"([^;&|)]*)", line):
            found.append(("module", script.replace("/", "."),
                          re.findall(r"--([\w-]+)", _own_arguments(rest))))
        for target in re.findall(r"(?:^|[;&|]\s*|\s)make ([a-z][\w-]*)", line):
            found.append(("make", target, []))
        for script, rest in re.findall(r"(contrastive-jax-[a-z-]+)([^;&|)]*)", line):
            found.append(("script", script, re.findall(r"--([\w-]+)", _own_arguments(rest))))
    return found


def _makefile_targets() -> set[str]:
    return set(re.findall(r"(?m)^([a-z][\w-]*):", _text(ROOT / "Makefile")))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_and_their_flags_exist(path):
    targets = _makefile_targets()
    problems = []
    for kind, name, flags in _invocations(path):
        if kind == "make":
            if name not in targets:
                problems.append(f"make {name}: no such Makefile target")
            continue
        if kind == "script":
            if name not in SCRIPTS:
                problems.append(f"{name}: not a console script of pyproject.toml")
                continue
            module = SCRIPT_MODULES[name]
        else:
            module = name
            if not module.startswith(("contrastive_jax", "experiments")):
                continue  # pip, venv, tensorboard, ...
            if _module_path(module) is None:
                problems.append(f"python -m {module}: no such module")
                continue
        defined = _defined_flags(module)
        problems += [f"{name} --{flag}: not a flag of {module}" for flag in flags
                     if flag not in defined]
    assert problems == [], f"{path.name}: " + "; ".join(problems)


def _config_fields(path: Path) -> set[str]:
    text = _text(path)
    fields = set(re.findall(r"--config\.([\w.]+)", text))
    fields |= set(re.findall(r"`config\.([\w.]+)", text))
    fields |= set(re.findall(r"\bconfig\.([a-z_]+(?:\.[a-z_]+)+)\s*=", _code(text)))
    return {f.rstrip(".") for f in fields}


def _has_field(config, dotted: str) -> bool:
    if any(dotted == f or dotted.startswith(f + ".") for f in OPTIONAL):
        return True
    node = config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if ".".join(parts[:i]) in FREE_FORM:
            return True
        if not hasattr(node, "keys") or part not in node.keys():
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_config_fields_exist(path):
    config_module = pytest.importorskip("contrastive_jax.train.config")
    config = config_module.default_config()
    missing = sorted(f for f in _config_fields(path) if not _has_field(config, f))
    assert missing == [], f"{path.name} names config fields that do not exist: {missing}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    broken = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _text(path)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        resolved = (path.parent / target).resolve()
        relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else None
        if not resolved.exists() and relative not in PENDING_PAGES:
            broken.append(target)
    assert broken == [], f"{path.name} links to missing files: {broken}"


@pytest.mark.parametrize("name", ["README.md", "docs/index.md"])
@pytest.mark.slow
def test_python_examples_run(name, capsys):
    blocks = re.findall(r"```python\n(.*?)```", _text(ROOT / name), flags=re.S)
    assert blocks, f"{name} has no Python example"
    for block in blocks:
        namespace = {}
        exec(compile(block, name, "exec"), namespace)  # noqa: S102 - the page's own example
    if name == "README.md":  # its example prints the loss
        assert re.search(r"\d\.\d", capsys.readouterr().out)


def test_the_checker_finds_what_is_wrong(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `python -m contrastive_jax.pretrain --workdir w --no_such_flag` or\n"
        "`make no-such-target`, with `--config.train.no_such_field=1`; see [x](missing.md).\n",
        encoding="utf-8",
    )
    script = tmp_path / "bench.md"
    script.write_text("    XLA_FLAGS= python experiments/bench/loop.py --devices 1 --no_such_flag\n",
                      encoding="utf-8")
    (_, name, flags), = _invocations(script)
    assert name == "experiments.bench.loop" and flags == ["devices", "no_such_flag"]
    assert "devices" in _defined_flags(name) and "no_such_flag" not in _defined_flags(name)
    kinds = {(kind, name) for kind, name, _ in _invocations(page)}
    assert ("module", "contrastive_jax.pretrain") in kinds and ("make", "no-such-target") in kinds
    (_, _, flags), = [i for i in _invocations(page) if i[0] == "module"]
    assert "no_such_flag" in flags and "no_such_flag" not in _defined_flags("contrastive_jax.pretrain")
    assert "workdir" in _defined_flags("contrastive_jax.pretrain")
    assert SCRIPTS["contrastive-jax-linear-eval"] == "linear_eval"
    assert "data-dir" in _defined_flags("experiments.parity.step")
    assert "no-such-target" not in _makefile_targets()
    assert _config_fields(page) == {"train.no_such_field"}
    config_module = pytest.importorskip("contrastive_jax.train.config")
    assert not _has_field(config_module.default_config(), "train.no_such_field")
    assert _has_field(config_module.default_config(), "loss.kwargs.mio.temperature")


def test_every_bibtex_key_a_loss_docstring_names_is_in_docs_losses():
    """The losses' References name BibTeX keys; each is an entry of docs/losses.md, and every
    entry there is named by some loss."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    named = set()
    for path in (root / "contrastive_jax" / "losses").glob("_*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip().startswith("BibTeX:"):
                named.update(re.findall(r"``(\w+)``", line))
    entries = set(re.findall(r"^@\w+\{(\w+),", (root / "docs" / "losses.md").read_text(
        encoding="utf-8"), re.MULTILINE))
    assert named and named == entries, (named - entries, entries - named)
