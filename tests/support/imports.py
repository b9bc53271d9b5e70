"""What an import statement brings in, as absolute module names (for the tests that check
which modules import which)."""

from __future__ import annotations

import ast


def imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute names an import statement of `module` (a path such as conveyor/x/y.py)
    brings in: each name of an `import`, or the module a `from` imports from."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module or ""]
    package = module.removesuffix(".py").split("/")[: -node.level]
    return [".".join([*package, *([node.module] if node.module else [])])]
