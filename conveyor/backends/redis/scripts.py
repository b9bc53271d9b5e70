"""The Redis store's Lua scripts: each operation that touches more than one key is one
script, so it is atomic against every other client. Scripts are loaded once per process and
called by their SHA (redis-py loads them again where a server restarted or a node is new)."""

from __future__ import annotations

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
)


def source(name: str) -> str:
    """A script's text: the shared functions, then the script's own."""
    lua = resources.files(__package__).joinpath("lua")
    common = lua.joinpath("common.lua").read_text()
    return f"{common}\n{lua.joinpath(f'{name}.lua').read_text()}"


def registry_source() -> str:
    return resources.files(__package__).joinpath("lua", "registry.lua").read_text()


class Scripts:
    """The registered scripts of one client (`redis.Redis` or `redis.RedisCluster`)."""

    def __init__(self, client: Any) -> None:
        self.by_name = {name: client.register_script(source(name)) for name in SCRIPTS}
        self.registry = client.register_script(registry_source())
