"""The model registry: models, their immutable versions, and the rules a version must satisfy."""
