"""The Redis store's Lua scripts: each operation that touches more than one key is one
script, so it is atomic against every other client.

On a server that has functions (Redis 7 and later) every script is also a function of one
library, loaded once per process and called by FCALL: a script's text runs from its top at
every call, so the shared functions it starts with are made again each time (a fifth of
what an empty script costs Redis), while a library makes them once. Elsewhere (older
servers, and a Redis Cluster, where redis-py routes each script to its slot's node) scripts
are called by their SHA and loaded again where a server restarted or a node is new.

A Redis at its `maxmemory` refuses what would grow it. The scripts that drain a queue or
change its messages' states (receives, deletes, visibility changes, sweeps, purges, moves,
edits, the registry's heartbeats) carry the flag ``allow-oom``, so that consumers go on
emptying a full server; sends, publishes and a move's copy into another slot do not, and
fail with Redis's OOM error until there is room (on Redis 7 and later: the flags are a
function's, or an EVAL script's first line; Redis 6 knows no flags and refuses any script
whose first growing command meets the limit).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

SCRIPTS = (
    "send",
    "claim",
    "delete",
    "visibility",
    "sweep",
    "stats",
    "peek",
    "edit",
    "move",
    "publish",
    "clear",
    "put",
    "upgrade",
)
REGISTRY = "registry"
# the scripts a full Redis still runs: none of them adds a message
ALLOW_OOM = frozenset(
    {"claim", "delete", "visibility", "sweep", "stats", "peek", "edit", "move", "clear",
     REGISTRY}
)  # fmt: skip

WIDE = "~" * 80  # longer than zset/hash-max-listpack-value (64 by default): see common.lua


def _text(name: str) -> str:
    text = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return text.replace("{{WIDE}}", WIDE)


def shebang(name: str) -> str:
    """The first line of a script with flags (Redis 7 and later)."""
    return f"#!lua flags={'allow-oom' if name in ALLOW_OOM else ''}\n"


def source(name: str, flags: bool = False) -> str:
    """A script's text: the shared functions, then the script's own; with its flags first
    where the server knows them."""
    text = f"{_text('common')}\n{_text(name)}"
    return shebang(name) + text if flags else text


def registry_source(flags: bool = False) -> str:
    return shebang(REGISTRY) + _text(REGISTRY) if flags else _text(REGISTRY)


def library() -> tuple[str, dict[str, str]]:
    """The library of every script as a function: its text, and each script's function
    name. Names carry a digest of the text and the flags, so libraries of different
    versions of Conveyor live side by side in one server."""
    bodies = {name: _text(name) for name in (*SCRIPTS, REGISTRY)}
    flagged = "\0".join(sorted(ALLOW_OOM))  # a library of other flags is another library
    digest = hashlib.sha1(
        "\0".join((_text("common"), *bodies.values(), flagged)).encode()
    ).hexdigest()
    tag = f"conveyor_{digest[:16]}"
    names = {name: f"{tag}_{name}" for name in bodies}
    parts = [f"#!lua name={tag}", _text("common")]
    for name, body in bodies.items():
        flags = "{'allow-oom'}" if name in ALLOW_OOM else "{}"
        parts.append(
            f"redis.register_function{{function_name='{names[name]}', flags={flags},"
            f" callback=function(KEYS, ARGV)\n{body}\nend}}"
        )
    return "\n".join(parts), names


class Scripts:
    """The registered scripts of one client (`redis.Redis` or `redis.RedisCluster`), and the
    library's function names where the server has loaded it (`functions`)."""

    def __init__(self, client: Any, flags: bool = False) -> None:
        """`flags`: the server knows scripts' flags (Redis 7 and later)."""
        self.by_name = {name: client.register_script(source(name, flags)) for name in SCRIPTS}
        self.registry = client.register_script(registry_source(flags))
        self.library, self._names = library()
        self.functions: dict[str, str] = {}  # script SHA -> function name, once loaded

    def use_functions(self) -> None:
        """Call the scripts as the library's functions (it is loaded)."""
        self.functions = {self.by_name[name].sha: fn for name, fn in self._names.items()
                          if name in self.by_name}  # fmt: skip
        self.functions[self.registry.sha] = self._names[REGISTRY]
