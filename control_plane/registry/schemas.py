"""The registry's JSON shapes: what a client sends and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from control_plane.labels import LABEL_KEY_PATTERN, NO_NUL_PATTERN
from control_plane.registry.gates import Gates
from control_plane.registry.orm import AliasMove, Model, ModelAlias, ModelVersion, VersionState
from control_plane.registry.resources import ResourceSettings
from control_plane.registry.serving import ServingSettings

if TYPE_CHECKING:  # tokenizer -> service -> schemas: the type only, for TokenizerOut.of
    from control_plane.registry.tokenizer import VersionTokenizer

# The name becomes a Triton model name and a directory name, so nothing that could reach a path.
MODEL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL_PATTERN)]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=64)]
Description = Annotated[str, StringConstraints(max_length=4096, pattern=NO_NUL_PATTERN)]

class _Input(BaseModel):
    # An unknown field is refused rather than ignored: a typo must not silently do nothing.
    model_config = ConfigDict(extra="forbid")


class ModelCreate(_Input):
    name: ModelName
    description: Description = ""
    labels: Labels = Field(default_factory=dict)


class ModelUpdate(_Input):
    description: Description | None = None
    labels: Labels | None = None


class ModelOut(BaseModel):
    name: str
    description: str
    labels: dict[str, str]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, model: Model) -> ModelOut:
        return cls(name=model.name, description=model.description, labels=model.labels,
                   created_at=model.created_at, updated_at=model.updated_at)


class VersionCreate(_Input):
    source: Annotated[str, StringConstraints(min_length=1, max_length=1024)] = Field(
        description="absolute path under a configured source root, hf://<org>/<repo>[@rev] "
                    "or s3://<bucket>/<key>")
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="vLLM AsyncEngineArgs fields, e.g. max_model_len")
    serving: ServingSettings = Field(
        default_factory=ServingSettings,
        description="priority levels, queue policies and back-pressure; defaults as shipped")
    triton_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Triton ModelConfig fields (JSON form) layered over the built config, e.g. "
                    "{\"dynamic_batching\": {\"max_queue_delay_microseconds\": 100}}; "
                    "the interface, instance groups and the serving settings' fields are refused")
    resources: ResourceSettings = Field(
        default_factory=ResourceSettings,
        description="device, engines per node and memory overrides for placement")
    gates: Gates = Field(
        default_factory=Gates,
        description="smoke prompts and comparisons a promotion runs before and after the swap")
    labels: Labels = Field(default_factory=dict)


class VersionUpdate(_Input):
    """The only mutable parts of a version: its lifecycle state and its labels."""

    state: VersionState | None = None
    labels: Labels | None = None


class VersionOut(BaseModel):
    model: str
    number: int
    source: str
    engine_args: dict[str, Any]
    serving: ServingSettings
    triton_config: dict[str, Any]
    resources: ResourceSettings
    gates: Gates
    model_profile: dict[str, Any] | None = Field(
        description="what the memory estimate reads from the files (weights, KV cache per "
                    "token), measured at registration; or why it could not be")
    checksum: str | None
    state: VersionState
    labels: dict[str, str]
    created_by: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, version: ModelVersion) -> VersionOut:
        return cls(model=version.model.name, number=version.number, source=version.source,
                   engine_args=version.engine_args,
                   serving=ServingSettings.model_validate(version.serving),
                   triton_config=version.triton_config,
                   resources=ResourceSettings.model_validate(version.resources),
                   gates=Gates.model_validate(version.gates),
                   model_profile=version.model_profile, checksum=version.checksum,
                   state=VersionState(version.state), labels=version.labels,
                   created_by=version.created_by, created_at=version.created_at,
                   updated_at=version.updated_at)

    @staticmethod
    def stored_fields(model: str, columns: Sequence[Any]) -> dict[str, Any]:
        """The fields, ready to serialize, from a stored version's columns in field order after
        ``model`` (any more are left out), without validating them again: they were validated
        when the version was written, and validating them on every list was a tenth of its CPU."""
        fields = dict(zip(_VERSION_OUT_FIELDS, (model, *columns), strict=False))
        if fields["serving"].keys() != _SERVING_FIELDS:
            # Versions registered before serving settings were stored in full hold {} (the
            # migration's default): they serve with the current defaults, so they show them.
            fields["serving"] = ServingSettings.model_validate(fields["serving"])
        if fields["resources"].keys() != _RESOURCE_FIELDS:
            # Likewise for resources, which came later still.
            fields["resources"] = ResourceSettings.model_validate(fields["resources"])
        if fields["gates"].keys() != _GATE_FIELDS:
            fields["gates"] = Gates.model_validate(fields["gates"])
        return fields


_VERSION_OUT_FIELDS = tuple(VersionOut.model_fields)
_SERVING_FIELDS = frozenset(ServingSettings.model_fields)
_RESOURCE_FIELDS = frozenset(ResourceSettings.model_fields)
_GATE_FIELDS = frozenset(Gates.model_fields)


class TokenizerOut(BaseModel):
    """What a gateway needs to count a version's prompt tokens as the backend does."""

    model: str
    version: int
    checksum: str | None = Field(description="the version's checksum, as registered")
    tokenizer_json: str = Field(description="the text of tokenizer.json")
    chat_template: str | None = Field(
        description="the chat template (chat_template.jinja, else tokenizer_config.json's); "
                    "null: the model has none and chat input is refused")
    special_tokens: dict[str, str] = Field(
        description="bos_token, eos_token, … as tokenizer_config.json names them: the chat "
                    "template may write them")

    @classmethod
    def of(cls, found: VersionTokenizer) -> TokenizerOut:
        files = found.files
        return cls(model=found.model, version=found.number, checksum=found.checksum,
                   tokenizer_json=files.tokenizer_json, chat_template=files.chat_template,
                   special_tokens=files.special_tokens)


class AliasMoveRequest(_Input):
    version: Annotated[int, Field(ge=1, le=2**31 - 1, description="the version number to point at")]


class AliasRollbackRequest(_Input):
    to: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="the version to go back to; default: the one the alias "
                                  "pointed at before its last move")


class AliasOut(BaseModel):
    model: str
    name: str
    version: int
    updated_by: str
    updated_at: datetime

    @classmethod
    def of(cls, model: str, alias: ModelAlias) -> AliasOut:
        return cls(model=model, name=alias.name, version=alias.version.number,
                   updated_by=alias.updated_by, updated_at=alias.updated_at)


class AliasMoveOut(BaseModel):
    from_version: int | None
    to_version: int
    moved_by: str
    moved_at: datetime

    @classmethod
    def of(cls, move: AliasMove) -> AliasMoveOut:
        return cls(from_version=move.from_number, to_version=move.to_number,
                   moved_by=move.moved_by, moved_at=move.moved_at)
