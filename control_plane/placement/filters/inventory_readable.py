"""Node rule: the node's GPU inventory could be read.

A node whose readings failed (NVML missing, its metrics endpoint silent) is refused as a whole:
placement must tell "full" from "unknown", and booking on a node it cannot see could overfill it.
"""

from __future__ import annotations

from control_plane.placement.model import NodeView, PlacementRequest


class InventoryReadable:
    name = "inventory-readable"
    description = "The node's GPU inventory could be read; a node that cannot be seen is not booked."

    def check(self, request: PlacementRequest, node: NodeView) -> str | None:
        if node.error is None:
            return None
        return f"GPU inventory unreadable: {node.error}"

    def missing(self, node_name: str, known: list[str]) -> str:
        """The detail for a node the request names but the inventory does not hold."""
        listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
        return (f"node {node_name!r} is not in the inventory (known: {listed or 'none'}); "
                "register it or fix the deployment's node")
