"""REST endpoint of the Triton model config a version loads with (the registry's versions, as
Triton's config builder renders them)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from control_plane.auth.dependencies import Reader
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.registry import service
from control_plane.registry.routes import VersionNumber
from control_plane.registry.schemas import ModelName
from control_plane.registry.serving import ServingSettings
from control_plane.triton import config_builder

router = APIRouter(prefix="/models", tags=["registry"],
                   responses=error_responses(401, 403, 422, 503))


@router.get("/{name}/versions/{number}/config", responses=error_responses(404))
def version_config(name: ModelName, number: VersionNumber, session: DbSession, _: Reader
                   ) -> dict[str, Any]:
    """The Triton model config (JSON form) this version is loaded with, under the model's name."""
    version = service.get_version(session, name, number)
    config = config_builder.build(name, ServingSettings.model_validate(version.serving),
                                  version.triton_config)
    return config_builder.to_json_dict(config)
