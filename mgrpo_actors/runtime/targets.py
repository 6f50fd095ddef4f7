"""Where the bus delivers: a pykka ActorRef (its mailbox) or, for tools and tests, a callable."""

from __future__ import annotations

from typing import Any

import pykka

from mgrpo_actors.log import get_logger

__all__ = ["Target", "tell"]

Target = Any  # a pykka ActorRef (anything with .tell) or a callable taking the item

log = get_logger(__name__)


def tell(target: Target, item: Any) -> bool:
    """Hand `item` to `target`; False if the target is gone or failed (the caller gives it back).

    A callable target runs on the bus thread: it must be quick and must not call blocking Bus methods.
    """
    try:
        if hasattr(target, "tell"):
            target.tell(item)
        else:
            target(item)
        return True
    except pykka.ActorDeadError:
        log.info("delivery to a stopped actor refused", subject=getattr(item, "subject", ""))
    except Exception as exc:
        log.error("delivery target failed", subject=getattr(item, "subject", ""), error=f"{type(exc).__name__}: {exc}")
    return False
