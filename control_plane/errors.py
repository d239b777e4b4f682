"""Every error the control plane reports to a user, with the HTTP status it maps to.

ControlPlaneError (500)
├── InvalidRequest (422)
│   ├── InvalidSource
│   ├── UnknownEngineArgument
│   ├── InvalidTritonConfig
│   ├── ValidationFailed
│   └── InvalidAdapter
├── NotFound (404)
│   ├── ModelNotFound
│   ├── VersionNotFound
│   ├── AliasNotFound
│   ├── NodeNotFound
│   ├── OperationNotFound
│   ├── TokenNotFound
│   ├── DeploymentNotFound
│   ├── TenantNotFound
│   ├── InferenceKeyNotFound
│   ├── AdapterNotFound
│   ├── DeploymentIdNotFound
│   ├── AdapterNotOnDeployment
│   ├── ScalingPolicyNotFound
│   └── TokenizerUnavailable: a version whose tokenizer files cannot be served (why)
├── Conflict (409)
│   ├── ModelAlreadyExists
│   ├── NodeAlreadyExists
│   ├── TenantAlreadyExists
│   ├── ModelInUse
│   ├── InvalidStateTransition
│   ├── InvalidAliasTarget
│   ├── InUseByDeployments
│   ├── OperationInProgress
│   ├── PlacementRefused
│   ├── AdapterAlreadyExists
│   ├── AdapterInUse
│   ├── AdapterOfAnotherVersion
│   └── DeploymentNotReady
├── Unauthorized (401)
├── Forbidden (403)
├── PreconditionFailed (412)
├── DatabaseUnavailable (503)
└── NodeError (502): raised inside operations; the operation's error carries the message
    ├── NodeUnavailable
    ├── DeploymentFailed
    └── AdapterRefused: the backend refused an adapter request (its reason)

The domain code raises these without knowing about HTTP frameworks; ``error_handlers`` turns them
into ``{"error": <class name>, "detail": <message>}``.
"""

from __future__ import annotations


class ControlPlaneError(Exception):
    status_code = 500
    # Response headers that come with the error (a 409's Location naming what is in the way).
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ControlPlaneError):
    status_code = 422


class InvalidSource(InvalidRequest):
    pass


class UnknownEngineArgument(InvalidRequest):
    pass


class InvalidTritonConfig(InvalidRequest):
    pass


class ValidationFailed(InvalidRequest):
    pass


class InvalidAdapter(InvalidRequest):
    pass


class NotFound(ControlPlaneError):
    status_code = 404


class ModelNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"model '{name}' does not exist")


class VersionNotFound(NotFound):
    def __init__(self, model: str, number: int) -> None:
        super().__init__(f"model '{model}' has no version {number}")


class AliasNotFound(NotFound):
    def __init__(self, model: str, alias: str) -> None:
        super().__init__(f"model '{model}' has no alias '{alias}'")


class NodeNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"node '{name}' is not registered")


class OperationNotFound(NotFound):
    def __init__(self, operation_id: str) -> None:
        super().__init__(f"operation '{operation_id}' does not exist")


class PromotionNotFound(NotFound):
    def __init__(self, promotion_id: str) -> None:
        super().__init__(f"promotion '{promotion_id}' does not exist")


class TokenNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"there is no API token named '{name}'; list them with GET "
                         "/api/v1/tokens or 'llmctl tokens list'")


class DeploymentNotFound(NotFound):
    def __init__(self, model: str, alias: str, node: str) -> None:
        super().__init__(f"alias '{alias}' of model '{model}' is not deployed on node '{node}'")


class ScalingPolicyNotFound(NotFound):
    def __init__(self, model: str, alias: str) -> None:
        super().__init__(f"alias '{alias}' of model '{model}' has no scaling policy; PUT one to "
                         f"/api/v1/models/{model}/aliases/{alias}/scaling")


class TenantNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"there is no tenant named '{name}'; list them with GET /api/v1/tenants "
                         "or 'llmctl tenants list'")


class InferenceKeyNotFound(NotFound):
    def __init__(self, tenant: str, key_id: int) -> None:
        super().__init__(f"tenant '{tenant}' has no inference API key with id {key_id}; list its "
                         f"keys with GET /api/v1/tenants/{tenant}/keys or 'llmctl tenants keys "
                         f"list {tenant}'")


class AdapterNotFound(NotFound):
    def __init__(self, model: str, number: int, name: str) -> None:
        super().__init__(f"version {number} of model '{model}' has no adapter '{name}'; list "
                         f"them with GET /api/v1/models/{model}/versions/{number}/adapters")


class DeploymentIdNotFound(NotFound):
    def __init__(self, deployment_id: int) -> None:
        super().__init__(f"there is no deployment {deployment_id}; list them (with their ids) "
                         "with GET /api/v1/deployments")


class AdapterNotOnDeployment(NotFound):
    def __init__(self, deployment: str, name: str) -> None:
        super().__init__(f"adapter '{name}' is not loaded on deployment {deployment}; list what "
                         "is with GET /api/v1/deployments/<id>/adapters")


class TokenizerUnavailable(NotFound):
    def __init__(self, model: str, number: int, reason: str) -> None:
        super().__init__(f"version {number} of model '{model}' has no tokenizer the control "
                         f"plane can serve: {reason}; gateways count its prompts by their byte "
                         "length (an upper bound) instead")


class Conflict(ControlPlaneError):
    status_code = 409


class NodeAlreadyExists(Conflict):
    def __init__(self, name: str) -> None:
        super().__init__(f"node '{name}' already exists; PATCH it or pick another name")


class TenantAlreadyExists(Conflict):
    def __init__(self, name: str) -> None:
        super().__init__(f"tenant '{name}' already exists; PATCH it or pick another name")


class ModelAlreadyExists(Conflict):
    def __init__(self, name: str) -> None:
        super().__init__(f"model '{name}' already exists; PATCH it or pick another name")


class ModelInUse(Conflict):
    pass


class InvalidStateTransition(Conflict):
    pass


class InvalidAliasTarget(Conflict):
    pass


class NothingToRollBackTo(Conflict):
    pass


class PromotionInProgress(Conflict):
    def __init__(self, model: str, running_id: str) -> None:
        self.running_id = running_id
        self.headers = {"Location": f"/api/v1/promotions/{running_id}"}
        super().__init__(f"promotion {running_id} of '{model}' is still running; wait for it "
                         f"(GET /api/v1/promotions/{running_id}, or 'llmctl promotions show "
                         f"{running_id}') and retry")


class InUseByDeployments(Conflict):
    pass


class OperationInProgress(Conflict):
    pass


class PlacementRefused(Conflict):
    """No GPU can take the engine; ``refusal`` names, per GPU, the rule that failed."""

    def __init__(self, message: str, refusal: object = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class AdapterAlreadyExists(Conflict):
    def __init__(self, model: str, number: int, name: str) -> None:
        super().__init__(f"version {number} of model '{model}' already has an adapter '{name}'; "
                         "adapters are immutable: pick another name, or delete it first")


class AdapterInUse(Conflict):
    pass


class AdapterOfAnotherVersion(Conflict):
    pass


class DeploymentNotReady(Conflict):
    pass


class Unauthorized(ControlPlaneError):
    status_code = 401


class Forbidden(ControlPlaneError):
    status_code = 403


class PreconditionFailed(ControlPlaneError):
    status_code = 412


class DatabaseUnavailable(ControlPlaneError):
    status_code = 503


class NodeError(ControlPlaneError):
    status_code = 502


class NodeUnavailable(NodeError):
    pass


class DeploymentFailed(NodeError):
    pass


class AdapterRefused(NodeError):
    pass
