# Two commands do all the set-up (each installs what is missing first, then reuses it):
#   make serve   the gateway + control plane + tritonserver with the demo LLM through our vLLM backend
#   make test    the whole test suite (what CI runs)
.PHONY: setup serve test lint docker-lint unit-test docker-build docker-e2e bench bench-overhead bench-priority bench-stall bench-admin-api bench-lifecycle bench-placement bench-placement-trials bench-burst bench-promotion bench-gateway bench-limits bench-fairness bench-autoscale

PYTHON := .venv/bin/python

setup:
	bash scripts/bootstrap.sh

serve: setup
	$(PYTHON) -m control_plane.serve

# pytest-xdist workers, in the two lanes tests/conftest.py explains; 0 runs everything in one process.
TEST_WORKERS ?= 2

test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS)

lint: setup
	.venv/bin/ruff check .
	.venv/bin/lint-imports
	.venv/bin/mypy

# Dockerfiles (hadolint), the Kubernetes overlays (every supported version's schemas), the
# Compose file, and the deployment policy (docker/checks/policy.py).
docker-lint: setup
	bash docker/checks/run.sh

unit-test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/unit

# The images (CPU variant, from local bases) and the compose stack run for real (what CI runs).
docker-build: setup
	bash docker/build.sh

docker-e2e: setup
	bash docker/ci.sh

bench: bench-overhead bench-priority bench-stall bench-admin-api bench-lifecycle bench-placement bench-burst bench-promotion bench-gateway bench-limits bench-fairness bench-autoscale

bench-overhead: setup
	$(PYTHON) -m bench.overhead

bench-priority: setup
	$(PYTHON) -m bench.priority

bench-stall: setup
	$(PYTHON) -m bench.batcher_stall

bench-admin-api: setup
	$(PYTHON) -m bench.admin_api

bench-lifecycle: setup
	$(PYTHON) -m bench.lifecycle

bench-placement: setup
	$(PYTHON) -m bench.placement

bench-placement-trials: setup
	$(PYTHON) -m bench.placement_trials

bench-burst: setup
	$(PYTHON) -m bench.burst

bench-promotion: setup
	$(PYTHON) -m bench.promotion

bench-gateway: setup
	$(PYTHON) -m bench.gateway

bench-limits: setup
	$(PYTHON) -m bench.limits

bench-fairness: setup
	$(PYTHON) -m bench.fairness

bench-autoscale: setup
	$(PYTHON) -m bench.autoscale
