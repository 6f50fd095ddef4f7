"""A warm start from the model cache (cached.py) named from a directory of one's own: `<out>/<side>` links to the
cached models, and `<out>/warmup.json` the cache's record naming those links (`mgrpo warmup --reuse`, which
`mgrpo compare --warmup` runs). The links are of one host: another host follows them only if it shares the cache.

Written and checked here together: `link_warm_start` makes the links, `same_build` tells whether they still lead
to the build they were made for (a cache entry deleted and built again holds other weights).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from mgrpo_actors.runtime.disk import atomic_write_text

if TYPE_CHECKING:  # cached.py imports torch and transformers: `mgrpo compare` only checks links
    from mgrpo_actors.warmup.cached import WarmStart

__all__ = ["link_warm_start", "same_build"]


def link_warm_start(start: WarmStart, out: Path) -> dict[str, Path]:
    """`start`'s models linked as out/<side> (each link made beside and moved in at once, in place of a link, a
    file or a directory there before) and its record written to out/warmup.json naming them; {side: link}."""
    out.mkdir(parents=True, exist_ok=True)
    record = start.record
    links = {}
    for side, directory in start.models.items():
        link, temporary = out / side, out / f".{side}.link"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(Path(directory).absolute(), target_is_directory=True)
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        os.replace(temporary, link)
        links[side] = link
        record["agents"][side]["dir"] = str(link)
    atomic_write_text(out / "warmup.json", json.dumps(record, indent=2), "the warm-up's record")
    return links


def same_build(out: Path) -> bool:
    """Whether the links in `out` (link_warm_start's) all lead to one build and it is the one they were made for:
    out/warmup.json and the record beside the linked models agree, but for the directories they name."""
    try:
        mine = json.loads((out / "warmup.json").read_text())
        entries = {(out / side).resolve().parent for side in mine["agents"]}
        if len(entries) != 1:
            return False
        built = json.loads(entries.pop().joinpath("warmup.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    for record in (mine, built):
        for agent in record.get("agents", {}).values():
            agent.pop("dir", None)
    return mine == built
