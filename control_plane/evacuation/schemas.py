"""JSON shape of a GPU evacuation under way."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from control_plane.evacuation.orm import GpuEvacuation


class EvacuationOut(BaseModel):
    model: str
    alias: str
    node: str = Field(description="the node of the faulty GPU, where the engine still serves")
    faults: str = Field(description="which GPU(s) reported what")
    replacement_node: str | None = Field(
        description="where the alias is loading or serving instead; null while no node has "
                    "healthy room")
    replacement_state: str | None
    detail: str = Field(description="the move's latest step, or why it cannot go on")
    started_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: GpuEvacuation) -> EvacuationOut:
        deployment, replacement = row.deployment, row.replacement
        return cls(model=deployment.model.name, alias=deployment.alias,
                   node=deployment.node.name, faults=row.faults,
                   replacement_node=None if replacement is None else replacement.node.name,
                   replacement_state=None if replacement is None else replacement.state,
                   detail=row.detail, started_at=row.started_at, updated_at=row.updated_at)


class EvacuationsOut(BaseModel):
    items: list[EvacuationOut]
