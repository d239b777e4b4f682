"""Node rule: the request allows this node.

A deployment names the node it runs on (``PlacementRequest.nodes``); ``None`` lets placement use
any node. Other nodes are reported, so a preview shows why a free node was not chosen.

This is the only rule a CPU engine is checked against: it books no GPU memory, so the node's
GPU inventory does not matter to it.
"""

from __future__ import annotations

from control_plane.placement.model import NodeView, PlacementRequest


class NodeAllowed:
    name = "node-allowed"
    description = "The node is one the deployment may run on (its named nodes, or any)."

    def check(self, request: PlacementRequest, node: NodeView) -> str | None:
        if request.nodes is None or node.name in request.nodes:
            return None
        # An empty tuple is a deployment with no node yet: nothing is allowed, which is said.
        allowed = ", ".join(request.nodes) or "none"
        return f"the deployment runs only on: {allowed}"
