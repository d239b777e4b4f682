"""Usage through the REST API, on SQLite and PostgreSQL: gateways' reports counted once however
often they are sent (also at once), summed per tenant, model and hour, read grouped by model,
hour and day, refusals by limit, the scopes, and a deleted tenant's history."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Scope
from tests.control_plane.conftest import issue_token

HOUR = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)


def report(entries: list[dict[str, Any]], report_id: str | None = None) -> dict[str, Any]:
    return {"id": report_id or uuid.uuid4().hex, "gateway": "gw-test", "entries": entries}


def entry(tenant: str = "acme", model: str = "m", hour: dt.datetime = HOUR, **counts: Any
          ) -> dict[str, Any]:
    return {"tenant": tenant, "model": model, "hour": hour.isoformat(), **counts}


def usage(client: TestClient, headers: dict[str, str], tenant: str = "acme", **params: Any
          ) -> dict[str, Any]:
    answer = client.get(f"/api/v1/tenants/{tenant}/usage", headers=headers, params={
        "since": "2026-12-01T00:00:00Z", "until": "2026-12-02T23:00:00Z", **params})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_reports_are_counted_once_and_read_grouped(
        client: TestClient, admin: dict[str, str], reader: dict[str, str],
        session_factory: sessionmaker[Session]) -> None:
    gateway = issue_token(session_factory, "gateway", Scope.REPORT)
    assert client.post("/api/v1/tenants", headers=admin, json={"name": "acme"}).status_code == 201
    first = report([entry(requests=3, prompt_tokens=30, output_tokens=12,
                          refusals={"requests_per_minute": 2}),
                    entry(model="chat", requests=1, prompt_tokens=5, output_tokens=5),
                    # Within the hour: the control plane counts it in the hour's row.
                    entry(hour=HOUR + dt.timedelta(minutes=59), requests=1, prompt_tokens=10,
                          output_tokens=4)])
    answered = client.post("/api/v1/usage", headers=gateway, json=first)
    assert answered.json() == {"id": first["id"], "counted": True, "entries": 3}
    again = client.post("/api/v1/usage", headers=gateway, json=first)  # a retry
    assert again.status_code == 200 and again.json()["counted"] is False
    later = report([entry(hour=HOUR + dt.timedelta(days=1), requests=2, prompt_tokens=20,
                          output_tokens=8, refusals={"tokens_per_minute": 1})])
    assert client.post("/api/v1/usage", headers=gateway, json=later).json()["counted"]

    by_model = usage(client, reader)
    assert by_model["totals"] == {"model": None, "hour": None, "day": None, "requests": 7,
                                  "prompt_tokens": 65, "output_tokens": 29, "refusals": {
                                      "requests_per_minute": 2, "tokens_per_minute": 1}}
    assert [(r["model"], r["requests"], r["prompt_tokens"]) for r in by_model["rows"]] == [
        ("chat", 1, 5), ("m", 6, 60)]
    by_hour = usage(client, reader, group_by="hour")
    assert [(r["hour"], r["requests"]) for r in by_hour["rows"]] == [
        ("2026-12-01T10:00:00Z", 5), ("2026-12-02T10:00:00Z", 2)]
    by_day = usage(client, reader, group_by="day")
    assert [(r["day"], r["output_tokens"]) for r in by_day["rows"]] == [
        ("2026-12-01", 21), ("2026-12-02", 8)]
    only_first_day = usage(client, reader, until="2026-12-01T23:00:00Z")
    assert only_first_day["totals"]["requests"] == 5

    # A deleted tenant's history stays readable by its name; an unknown name is a 404.
    assert client.delete("/api/v1/tenants/acme", headers=admin).status_code == 204
    assert usage(client, reader)["totals"]["requests"] == 7
    unknown = client.get("/api/v1/tenants/nobody/usage", headers=reader)
    assert unknown.status_code == 404 and unknown.json()["error"] == "TenantNotFound"


def test_the_same_report_sent_at_once_by_racing_retries_is_counted_once(
        live_url: str, admin: dict[str, str], session_factory: sessionmaker[Session]) -> None:
    gateway = issue_token(session_factory, "gateway", Scope.REPORT)
    with httpx.Client(base_url=live_url, headers=admin) as http:
        assert http.post("/api/v1/tenants", json={"name": "acme"}).status_code == 201
    same = report([entry(requests=1, prompt_tokens=1, output_tokens=1)])
    others = [report([entry(requests=1, prompt_tokens=1, output_tokens=1)]) for _ in range(4)]
    answers: list[httpx.Response] = []

    def send(body: dict[str, Any]) -> None:
        with httpx.Client(base_url=live_url, headers=gateway, timeout=30) as http:
            answers.append(http.post("/api/v1/usage", json=body))

    threads = [threading.Thread(target=send, args=(body,)) for body in [same] * 4 + others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    assert sum(answer.json()["counted"] for answer in answers) == 5
    with httpx.Client(base_url=live_url, headers=admin) as http:
        totals = http.get("/api/v1/tenants/acme/usage", params={
            "since": "2026-12-01T00:00:00Z", "until": "2026-12-01T23:00:00Z"}).json()["totals"]
    assert totals["requests"] == 5  # one for the report sent four times, four for the others


def test_who_may_report_and_what_is_refused(client: TestClient, reader: dict[str, str],
                                            writer: dict[str, str]) -> None:
    body = report([entry(requests=1)])
    refused = client.post("/api/v1/usage", headers=reader, json=body)
    assert refused.status_code == 403 and "report" in refused.json()["detail"]
    assert client.post("/api/v1/usage", headers=writer, json=body).status_code == 200
    bad = client.post("/api/v1/usage", headers=writer, json=report([entry(requests=-1)]))
    assert bad.status_code == 422 and "requests" in bad.text
    backwards = client.get("/api/v1/tenants/acme/usage", headers=reader, params={
        "since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"})
    assert backwards.status_code in (404, 422)
