"""The benchmarks name what exists: every import in `bench/` of this project's modules (the
package, the test helpers, the benchmarks' own), at the top of a module or inside a
function, names a module there is and names it defines. A benchmark runs for minutes before
it reaches an import inside its `main`; a module moved or a name renamed would otherwise be
found only by whoever runs it next."""

from __future__ import annotations

import ast
from pathlib import Path

from .support.imports import imported

ROOT = Path(__file__).resolve().parent.parent
OURS = ("conveyor", "tests", "bench")


def _module_file(name: str) -> Path | None:
    """The file of module `name` under the repository (a package's __init__.py)."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defined(path: Path) -> set[str]:
    """The names a module binds at its top level (in if/try blocks too)."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(ast.parse(path.read_text(), str(path)).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []))
            todo.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return names


def _problems(where: Path, source: str) -> list[str]:
    """What the imports of `source` (the module at `where`, relative to the repository) name
    that does not exist."""
    found = []
    for node in ast.walk(ast.parse(source, str(where))):
        if isinstance(node, ast.Import):
            for name in imported(str(where), node):
                if name.split(".")[0] in OURS and _module_file(name) is None:
                    found.append(f"{where}:{node.lineno}: no module {name}")
        elif isinstance(node, ast.ImportFrom):
            [module] = imported(str(where), node)
            if module.split(".")[0] not in OURS:
                continue
            file = _module_file(module)
            if file is None:
                found.append(f"{where}:{node.lineno}: no module {module}")
                continue
            defined = _defined(file)
            for alias in node.names:
                if alias.name not in defined and _module_file(f"{module}.{alias.name}") is None:
                    found.append(f"{where}:{node.lineno}: {module} has no {alias.name}")
    return found


def test_bench_imports_name_what_exists() -> None:
    paths = sorted((ROOT / "bench").glob("*.py"))
    assert paths
    problems = [p for path in paths for p in _problems(path.relative_to(ROOT), path.read_text())]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_moved_module() -> None:
    """The check itself: an import of a module that moved, or of a name a module lacks, is
    found; those that exist are not."""
    source = (
        "import conveyor.nowhere\n"
        "def main():\n"
        "    from tests import dynamoservers\n"
        "    from conveyor import NoSuchName, Client\n"
        "    from .runs import pct\n"
        "    from .gone import x\n"
        "    from tests.support import dynamoservers as fine\n"
    )
    problems = _problems(Path("bench/check.py"), source)
    assert sorted(problems) == [
        "bench/check.py:1: no module conveyor.nowhere",
        "bench/check.py:3: tests has no dynamoservers",
        "bench/check.py:4: conveyor has no NoSuchName",
        "bench/check.py:6: no module bench.gone",
    ]
