"""GET /models/{m}/stats refusals and its shape without nodes, on SQLite and PostgreSQL (the
figures from a live node are checked with the gateway's stack)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.control_plane.reservations.test_booking import add_node, add_version


def test_stats_name_a_bad_window_an_unknown_model_and_alias(
        client: TestClient, reader: dict[str, str], writer: dict[str, str]) -> None:
    add_version(client, writer, "m", {})
    bad = client.get("/api/v1/models/m/stats", headers=reader, params={"window": "soon"})
    assert bad.status_code == 422, bad.text
    assert "window 'soon' is not a duration" in bad.json()["detail"]
    too_long = client.get("/api/v1/models/m/stats", headers=reader, params={"window": "2d"})
    assert too_long.status_code == 422
    beyond = client.get("/api/v1/models/m/stats", headers=reader, params={"window": "3h"})
    assert beyond.status_code == 422 and "LLMCP_STATS_KEEP_SECONDS" in beyond.json()["detail"]
    unknown = client.get("/api/v1/models/nope/stats", headers=reader)
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    no_alias = client.get("/api/v1/models/m/stats", headers=reader, params={"alias": "prod"})
    assert no_alias.status_code == 404 and "no alias 'prod'" in no_alias.json()["detail"]
    assert client.get("/api/v1/models/m/stats").status_code == 401


def test_a_deployment_whose_node_was_not_read_says_why(
        client: TestClient, reader: dict[str, str], writer: dict[str, str]) -> None:
    add_node(client, writer, "n", None)
    add_version(client, writer, "m", {})
    assert client.put("/api/v1/models/m/aliases/production", headers=writer,
                      json={"version": 1}).status_code in (200, 201)
    assert client.put("/api/v1/models/m/aliases/production/deployments/n",
                      headers=writer).status_code == 202
    body = client.get("/api/v1/models/m/stats", headers=reader,
                      params={"alias": "production", "window": "90s"}).json()
    assert body["window_seconds"] == 90 and body["total"] is None
    [deployment] = body["deployments"]
    assert (deployment["alias"], deployment["node"]) == ("production", "n")
    assert deployment["stats"] is None
    # The node was registered without a metrics URL, so nothing reads it.
    assert "fewer than two readings of node n" in deployment["unavailable"]
