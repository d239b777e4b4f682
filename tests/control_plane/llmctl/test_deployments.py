"""llmctl deployments against a node that refuses every connection: the deployment is recorded
and its operation fails, which --wait turns into exit 3; status shows where it stands."""

from __future__ import annotations

import socket

from control_plane.deployments.schemas import DeploymentOut, DeploymentStarted
from control_plane.operations.schemas import OperationOut
from tests.control_plane.llmctl.conftest import Llmctl, api


def test_deploy_status_and_a_failed_operation(llmctl: Llmctl, live_url: str,
                                              admin: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
        assert http.post("/models/chat/versions", json={"source": "hf://org/chat"}
                         ).status_code == 201
        assert http.put("/models/chat/aliases/production", json={"version": 1}
                        ).status_code == 200
        assert http.post("/nodes", json={"name": "down",
                                         "http_url": f"http://127.0.0.1:{closed_port}",
                                         "grpc_url": f"127.0.0.1:{closed_port}"}
                         ).status_code == 201

    failed = llmctl("deployments", "deploy", "chat", "--alias", "production", "--node", "down",
                    "--wait", "--timeout", "120", "--json")
    document = failed.error_document(3)
    assert document["error"] == "OperationFailed"
    operation = OperationOut.model_validate(document["operation"])
    assert operation.status == "failed" and operation.id in document["detail"]

    started = llmctl("deployments", "deploy", "chat", "--alias", "production", "--node", "down",
                     "--json")
    assert started.code == 0, started
    assert DeploymentStarted.model_validate(started.document()).deployment.node == "down"
    waited = llmctl("operations", "wait", started.document()["operation"]["id"],
                    "--timeout", "120")
    assert waited.code == 3 and "failed" in waited.stderr

    listed = llmctl("deployments", "status", "chat", "--json").document()
    assert [(d["alias"], d["node"]) for d in listed["items"]] == [("production", "down")]
    one = llmctl("deployments", "status", "chat", "--alias", "production", "--node", "down",
                 "--json")
    assert DeploymentOut.model_validate(one.document()).alias == "production"
    table = llmctl("deployments", "status", "chat", env={"CI": "true"})
    assert table.stdout.splitlines()[0].split()[:3] == ["ALIAS", "NODE", "STATE"]
    missing = llmctl("deployments", "status", "chat", "--alias", "staging", "--node", "down",
                     "--json")
    assert missing.error_document(2)["status"] == 404
