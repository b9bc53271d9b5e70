"""The layers: the ways in (the HTTP server and the push gateway) reach the stores through the
client alone, and no way in decides anything by a store's scheme (stores declare hints)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import conveyor

from .support.imports import imported

PACKAGE = Path(conveyor.__file__).parent
WAYS_IN = ("server", "push", "cli", "spark")


def _modules(*parts: str) -> Iterator[tuple[str, ast.Module]]:
    for part in parts:
        for path in sorted((PACKAGE / part).rglob("*.py")):
            yield str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(), str(path))


def _backend_imports(module: str, tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in imported(module, node):
                if name == "conveyor.backends" or name.startswith("conveyor.backends."):
                    found.append(f"{module}:{node.lineno} imports {name}")
    return found


def test_the_server_and_the_push_gateway_import_nothing_from_the_stores() -> None:
    found = [
        line
        for module, tree in _modules("server", "push")
        for line in _backend_imports(module, tree)
    ]
    assert found == []


def test_the_check_finds_an_import_of_a_store_module() -> None:
    tree = ast.parse(
        "from ...backends.receipts import parse_receipt\nimport conveyor.backends.base\n"
    )
    assert _backend_imports("conveyor/server/sqs/api.py", tree) == [
        "conveyor/server/sqs/api.py:1 imports conveyor.backends.receipts",
        "conveyor/server/sqs/api.py:2 imports conveyor.backends.base",
    ]
    assert (
        _backend_imports("conveyor/server/sqs/api.py", ast.parse("from ..sns import api\n")) == []
    )


def _scheme_branches(module: str, tree: ast.Module) -> list[str]:
    """Comparisons of a store's scheme (`x.backend.scheme == ...`, `backend.scheme in ...`)."""
    found: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            if (
                isinstance(operand, ast.Attribute)
                and operand.attr == "scheme"
                and (
                    (isinstance(operand.value, ast.Attribute) and operand.value.attr == "backend")
                    or (isinstance(operand.value, ast.Name) and operand.value.id == "backend")
                )
            ):
                found.append(node.lineno)
    return [f"{module}:{line}" for line in sorted(found)]


def test_no_way_in_branches_on_a_stores_scheme() -> None:
    found = [line for module, tree in _modules(*WAYS_IN) for line in _scheme_branches(module, tree)]
    assert found == []


def test_the_check_finds_a_branch_on_a_scheme() -> None:
    tree = ast.parse(
        'threads = 1 if client.backend.scheme == "sqlite" else 8\n'
        'if "sqs" != backend.scheme:\n    pass\n'
        'tls = self.scheme == "https"\n'  # a URL's scheme, not a store's
    )
    assert _scheme_branches("conveyor/push/gateway.py", tree) == [
        "conveyor/push/gateway.py:1",
        "conveyor/push/gateway.py:2",
    ]


# what a module outside the client, the catalog and `Queue` may read of a store: its hints
# and its event-loop commit contract (`aio.offload` asks it where a call runs)
HINTS = frozenset(
    {
        "scheme",
        "batch_limit",
        "one_writer",
        "joined_send_receive",
        "clock",
        "poll_interval",
        "loop_commits",
    }
)
# the modules that call a store's methods: the client, the catalog and `Queue`; and the
# stores themselves and the URL that opens one
STORE_CALLERS = ("client.py", "catalog.py", "queues.py", "urls.py")


def _store_uses(module: str, tree: ast.Module) -> list[str]:
    """Uses of a store object (`backend`, `x.backend`, `x._backend`) other than its hints."""

    def is_store(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in ("backend", "_backend")
        return isinstance(node, ast.Attribute) and node.attr in ("backend", "_backend")

    return [
        f"{module}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and is_store(node.value) and node.attr not in HINTS
    ]


def test_only_the_client_the_catalog_and_queue_call_a_store() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "backends" or str(relative) in STORE_CALLERS:
            continue
        module = str(path.relative_to(PACKAGE.parent))
        found += _store_uses(module, ast.parse(path.read_text(), str(path)))
    assert found == []


def test_the_check_finds_a_store_call() -> None:
    tree = ast.parse(
        "got = self.backend.receive(name, 10, 30.0)\n"
        "backend.wait_for_messages(name, 0, 1.0)\n"
        "most = min(100, gw.client.backend.batch_limit)\n"  # a hint
        "await offload(self.backend, queue.claim, 10, 30.0)\n"  # handed on, not called
    )
    assert _store_uses("conveyor/push/dispatch.py", tree) == [
        "conveyor/push/dispatch.py:1 .receive",
        "conveyor/push/dispatch.py:2 .wait_for_messages",
    ]
