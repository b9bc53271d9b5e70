"""What to install for an optional part (an extra), said for the way Conveyor was installed.

Conveyor is not on a package index: an extra is installed from where Conveyor came from, a
checkout (``pip install -e '.[postgres]'``), a directory or a wheel file. pip records
which in the distribution's ``direct_url.json`` (PEP 610); where it cannot be read, the
hint names the extra's own requirements, which install from PyPI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from importlib import metadata

DISTRIBUTION = "conveyor-mq"


def install_command(extra: str) -> str:
    """The command that installs `extra` into the environment Conveyor runs in."""
    from importlib import metadata  # what it costs to import is paid only when asked

    # a checkout's own egg-info (no record of the install) may come first on sys.path
    found = list(metadata.distributions(name=DISTRIBUTION))
    if not found:  # run from a source tree that is not installed
        return _requirements(None, extra)
    dist = next((d for d in found if _origin(d) is not None), found[0])
    origin = _origin(dist)
    if origin is not None:
        path, editable = origin
        if os.path.isdir(path):
            where = "." if _same(path, os.getcwd()) else path
            flag = "-e " if editable else ""
            return f"pip install {flag}{shlex.quote(f'{where}[{extra}]')}"
        if path.endswith(".whl") and os.path.isfile(path):
            return f"pip install {shlex.quote(f'{path}[{extra}]')}"
    return _requirements(dist, extra)


def missing(extra: str, part: str, module: str | None) -> str:
    """The message for a part that cannot run because `module` (of `extra`) is missing."""
    what = f" ({module} is not installed)" if module else ""
    return f"{part} needs the {extra} extra{what}: {install_command(extra)}"


def _origin(dist: metadata.Distribution) -> tuple[str, bool] | None:
    """The local directory or wheel file Conveyor was installed from, and whether it was
    an editable install."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
        url = urlsplit(info["url"])
    except (ValueError, KeyError, TypeError):
        return None
    if url.scheme != "file":
        return None
    editable = bool((info.get("dir_info") or {}).get("editable"))
    return unquote(url.path), editable


def _requirements(dist: metadata.Distribution | None, extra: str) -> str:
    """`pip install` of the extra's own requirements (from PyPI), as the metadata lists
    them."""
    wanted: list[str] = []
    marker = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
    for requirement in (dist.requires or []) if dist is not None else []:
        spec, _, condition = requirement.partition(";")
        found = marker.search(condition)
        if found is not None and found.group(1) == extra:
            wanted.append(shlex.quote(spec.strip()))
    if not wanted:
        return f"install Conveyor with its {extra} extra"
    return "pip install " + " ".join(wanted)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
