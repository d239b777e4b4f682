"""What the node endpoints need from the features that build on nodes, handed in by the app: the
Triton version the reconciler last read on each node, and the check that nothing is still
deployed on a node about to be removed. Nodes sit below deployments, so they do not import them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import Request
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class NodeDependents:
    # node ids -> {node id: Triton version last read there}
    server_versions: Callable[[Session, Sequence[int]], dict[int, str]]
    # Raises (409) while something is deployed on the node, by name.
    check_removable: Callable[[Session, str], None]


def node_dependents(request: Request) -> NodeDependents:
    dependents: NodeDependents = request.app.state.node_dependents
    return dependents
