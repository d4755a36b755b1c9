"""The package's shape, as test/import-graph.test.ts and biome check src/: every import inside the package goes to
the importer's own part or to a lower layer (type-only imports and imports inside functions included), what must work
with the standard library alone imports nothing else, and functions are at most 60 lines."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import minisandbox

PACKAGE = Path(minisandbox.__file__).parent

#: Lowest first. A part is a module of the package or a subpackage (its top name under minisandbox).
LAYERS: list[set[str]] = [
    {"_generated"},
    {"errors", "token", "command", "mini_output"},
    {"client"},
    {"minisweagent", "sweagent", "swerex", "swerex_pytest", "configs", "rl"},
    {"fleet"},
    {"__init__"},
]

#: Parts that must import only the standard library (and each other): what `pip install` without extras gives.
STDLIB_ONLY = {
    "_generated",
    "errors",
    "token",
    "command",
    "mini_output",
    "client",
    "minisweagent",
    "sweagent",
    "configs",
    "rl",
}
#: Imported only inside try/except ImportError (optional frameworks) or by the extras.
OPTIONAL = {"minisweagent", "yaml", "skyrl", "skyrl_train", "verl", "pyarrow"}


def part_of(module: str) -> str:
    """``minisandbox.rl.agent`` -> ``rl``; ``minisandbox`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(part: str) -> int:
    return next(i for i, parts in enumerate(LAYERS) if part in parts)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    names = list(rel.parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of a file, relative ones resolved."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            if not node.module:  # `from . import jobs`: the modules named
                out += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return out


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {part_of(module_name(p)) for p in modules()}
    assert parts - set().union(*LAYERS) == set()


def test_imports_go_to_the_importer_s_own_part_or_lower() -> None:
    wrong = []
    for path in modules():
        source = part_of(module_name(path))
        for line, target in imports(path):
            if not target.startswith("minisandbox"):
                continue
            to = part_of(target)
            if to != source and layer_of(to) >= layer_of(source):
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} -> {target}")
    assert wrong == []


def test_the_standard_library_parts_need_nothing_else() -> None:
    stdlib = set(sys.stdlib_module_names)
    wrong = []
    for path in modules():
        if part_of(module_name(path)) not in STDLIB_ONLY:
            continue
        for line, target in imports(path):
            top = target.split(".")[0]
            if top not in stdlib and top != "minisandbox" and top not in OPTIONAL:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} -> {target}")
    assert wrong == []


def test_the_checks_see_what_they_must() -> None:
    found = {t: n for n, t in imports(PACKAGE / "fleet" / "cli.py")}
    assert "minisandbox.fleet.jobs" in found, "imports inside functions and `from . import x` are seen"
    assert "minisandbox.token" in {t for _, t in imports(PACKAGE / "swerex" / "runtime.py")}, "`..` resolves"
    assert layer_of("fleet") > layer_of("client") > layer_of("errors")


def test_functions_are_at_most_60_lines_as_in_typescript() -> None:
    long = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
                continue
            if node.end_lineno - node.lineno + 1 > 60:
                long.add(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert long == set(), f"functions over 60 lines: {sorted(long)}"
