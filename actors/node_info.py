"""Answers `mgrpo.<run>.node.ping` with this node's roles, versions, uptime and dead-letter count."""

from __future__ import annotations

import os
import socket
import time

from mgrpo_actors.runtime import Bus, BusActor, Delivery
from mgrpo_actors.versions import package_versions
from protocols import NodeInfo, NodePing

__all__ = ["NodeInfoActor"]


class NodeInfoActor(BusActor):
    """Every node runs one; no queue group, so a ping reaches all nodes of the run."""

    role = "node"

    def __init__(self, bus: Bus, roles: list[str]) -> None:
        super().__init__(bus, name=f"node-info-{bus.node}")
        self.roles = list(roles)
        self.started = time.monotonic()
        self.versions = package_versions()

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.node_ping)

    def handlers(self) -> dict:
        return {NodePing: self.on_ping}

    def on_ping(self, ping: NodePing, delivery: Delivery) -> NodeInfo:
        return NodeInfo(
            node=self.bus.node,
            roles=self.roles,
            versions=self.versions,
            uptime_s=time.monotonic() - self.started,
            pid=os.getpid(),
            host=socket.gethostname(),
            dead_letters=self.bus.dead_letter_total,
        )
