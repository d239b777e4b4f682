"""The version manifest: one YAML or JSON file holding what a version is and its gates, as a
model repository keeps it beside its code. Its JSON Schema is generated from this model
(``llmctl schema manifest``), so editors and CI check files against what the API accepts."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from control_plane.registry.schemas import ModelName, VersionCreate

MANIFEST_SCHEMA_ID = "https://llm-platform.invalid/schemas/version-manifest.json"


class VersionManifest(VersionCreate):
    """A version: source, engine arguments, serving and priority settings, Triton config
    overrides, resources, labels, and the gates a promotion runs."""

    model: ModelName | None = Field(
        default=None, description="the model this version belongs to; when given it must be the "
                                  "model it is registered or promoted to")

    def version_create(self) -> VersionCreate:
        return VersionCreate.model_validate(self.model_dump(exclude={"model"}))


def manifest_json_schema() -> dict[str, Any]:
    schema = VersionManifest.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": MANIFEST_SCHEMA_ID, **schema, "title": "Version manifest"}
