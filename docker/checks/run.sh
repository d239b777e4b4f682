#!/usr/bin/env bash
# The deployment checks (make docker-lint): hadolint on every Dockerfile, every Kustomize overlay
# rendered and validated against the Kubernetes schemas of each supported version, the Compose
# file against the Compose specification, then the policy the schemas cannot express.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin="${VENV_BIN:-$root/.venv/bin}"

if ! command -v kubectl >/dev/null; then
  echo "docker-lint: kubectl is not installed; it renders the overlays (kubectl kustomize)" >&2
  exit 1
fi

# The Kubernetes versions the manifests must be valid for: 1.29 through 1.37 (kubernetes-validate
# 1.37.0 bundles the schemas of 1.25 to 1.37). The manifests use nothing newer than 1.23
# (autoscaling/v2, policy/v1, Job TTLs); the floor is what we promise, not what they need.
k8s_versions=(1.29 1.30 1.31 1.32 1.33 1.34 1.35 1.36 1.37)

mapfile -t dockerfiles < <(find docker -type f \( -name 'Dockerfile*' -o -name '*.Dockerfile' \) | sort)
if [ "${#dockerfiles[@]}" -eq 0 ]; then
  echo "docker-lint: no Dockerfile under docker/"
else
  for dockerfile in "${dockerfiles[@]}"; do
    echo "docker-lint: hadolint $dockerfile"
    "$bin/hadolint" --config docker/.hadolint.yaml --no-color "$dockerfile"
  done
fi

for overlay in docker/k8s/overlays/*/; do
  overlay="${overlay%/}"
  rendered="$(kubectl kustomize "$overlay")"
  for version in "${k8s_versions[@]}"; do
    echo "docker-lint: $overlay against Kubernetes $version (strict)"
    "$bin/kubernetes-validate" --strict --quiet --kubernetes-version "$version.0" - <<<"$rendered"
  done
done

if [ -f docker/compose.yaml ]; then
  echo "docker-lint: docker/compose.yaml against the Compose specification"
  "$bin/check-jsonschema" --builtin-schema vendor.compose-spec docker/compose.yaml
else
  echo "docker-lint: docker/compose.yaml does not exist; skipped"
fi

"$bin/python" docker/checks/policy.py
