"""``llmctl tenants``: who may call the inference gateway, and with which keys (admin scope to
change, read scope to read)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.models import show_page_position
from control_plane.llmctl.commands.options import Limit, Offset
from control_plane.llmctl.errors import usage_error
from control_plane.llmctl.invocation import invocation, segment
from control_plane.llmctl.output import Output, cell, when

tenants_app = typer.Typer(help="Tenants of the inference gateway: allowed models, priority "
                               "limits, API keys.", no_args_is_help=True)
keys_app = typer.Typer(help="A tenant's inference API keys: create (the secret is shown once), "
                            "list, revoke.", no_args_is_help=True)
tenants_app.add_typer(keys_app, name="keys")

TenantArgument = Annotated[str, typer.Argument(metavar="TENANT", help="the tenant's name")]
Models = Annotated[list[str] | None, typer.Option(
    "--model", metavar="MODEL",
    help="a model the tenant may call (M allows M and every M.<alias>); repeat for more; '*' "
         "for every model")]
MaxLevel = Annotated[int | None, typer.Option(
    "--max-priority-level", min=1, metavar="N",
    help="the most urgent priority level the tenant may use (1, the most urgent: any)")]
DefaultLevel = Annotated[str | None, typer.Option(
    "--default-priority-level", metavar="N|none",
    help="the level of a request that names none; 'none': the model's default")]
OverLimit = Annotated[str | None, typer.Option(
    "--over-limit", metavar="refuse|lower",
    help="a request more urgent than the maximum: refuse it, or lower it to the maximum")]


def show_tenant(out: Output, tenant: dict[str, Any], title: str | None = None) -> None:
    out.fields([("name", tenant["name"]), ("enabled", tenant["enabled"]),
                ("allowed_models", ",".join(tenant["allowed_models"]) or "-"),
                ("max_priority_level", tenant["max_priority_level"]),
                ("default_priority_level", tenant["default_priority_level"]),
                ("priority_over_limit", tenant["priority_over_limit"]),
                ("weight", tenant.get("weight")),
                ("created", when(tenant["created_at"])),
                ("updated", when(tenant["updated_at"]))], title)


def _default_level(given: str) -> int | None:
    if given.strip().lower() == "none":
        return None
    try:
        return int(given)
    except ValueError:
        raise usage_error(f"--default-priority-level '{given}' is not a level; give a number "
                          "such as 2, or 'none' for the model's default") from None


Weight = Annotated[float | None, typer.Option(
    "--weight", min=0.001, max=1000, metavar="W",
    help="its fair share of a priority level: 2 gets twice the service of 1 while both wait")]


def _settings(models: list[str] | None, max_level: int | None, default_level: str | None,
              over_limit: str | None, enabled: bool | None,
              weight: float | None = None) -> dict[str, Any]:
    # Only what was given: the server keeps (or defaults) the rest. It checks the values too.
    body: dict[str, Any] = {}
    if models:
        body["allowed_models"] = models
    if max_level is not None:
        body["max_priority_level"] = max_level
    if default_level is not None:
        body["default_priority_level"] = _default_level(default_level)
    if over_limit is not None:
        body["priority_over_limit"] = over_limit
    if enabled is not None:
        body["enabled"] = enabled
    if weight is not None:
        body["weight"] = weight
    return body


@tenants_app.command("create")
def create(ctx: typer.Context, name: Annotated[str, typer.Argument(
               metavar="NAME", help="letters, digits, '.', '_', '@' or '-'")],
           model: Models = None, max_priority_level: MaxLevel = None,
           default_priority_level: DefaultLevel = None, over_limit: OverLimit = None,
           enabled: Annotated[bool, typer.Option(
               "--enabled/--disabled", help="a disabled tenant's requests are refused")] = True,
           weight: Weight = None) -> None:
    """Create a tenant (every model, any priority, unless told otherwise)."""
    run = invocation(ctx)
    body = {"name": name, **_settings(model, max_priority_level, default_priority_level,
                                      over_limit, enabled, weight)}
    tenant = run.client.post("/tenants", body)
    run.out.present(tenant, lambda: show_tenant(run.out, tenant,
                                                f"created tenant '{tenant['name']}'"))


@tenants_app.command("list")
def list_tenants(ctx: typer.Context, limit: Limit = 50, offset: Offset = 0) -> None:
    """List tenants by name."""
    run = invocation(ctx)
    page = run.client.get("/tenants", {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["NAME", "ENABLED", "MODELS", "MAX LEVEL", "DEFAULT LEVEL", "OVER LIMIT"],
                      [[t["name"], t["enabled"], ",".join(t["allowed_models"]),
                        t["max_priority_level"], t["default_priority_level"],
                        t["priority_over_limit"]] for t in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@tenants_app.command("show")
def show(ctx: typer.Context, tenant: TenantArgument) -> None:
    """Show one tenant."""
    run = invocation(ctx)
    found = run.client.get(f"/tenants/{segment(tenant)}")
    run.out.present(found, lambda: show_tenant(run.out, found))


@tenants_app.command("update")
def update(ctx: typer.Context, tenant: TenantArgument, model: Models = None,
           max_priority_level: MaxLevel = None, default_priority_level: DefaultLevel = None,
           over_limit: OverLimit = None,
           enabled: Annotated[bool | None, typer.Option(
               "--enabled/--disabled", help="enable or disable the tenant",
               show_default=False)] = None,
           weight: Weight = None) -> None:
    """Change a tenant: only the options given change."""
    run = invocation(ctx)
    body = _settings(model, max_priority_level, default_priority_level, over_limit, enabled,
                     weight)
    if not body:
        raise usage_error("nothing to change: give at least one of --model, "
                          "--max-priority-level, --default-priority-level, --over-limit, "
                          "--enabled/--disabled, --weight")
    found = run.client.patch(f"/tenants/{segment(tenant)}", body)
    run.out.present(found, lambda: show_tenant(run.out, found,
                                               f"updated tenant '{found['name']}'"))


LIMIT_KINDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "daily_tokens")
LimitValue = Annotated[str | None, typer.Option(metavar="N|none", show_default=False)]


def _limit(option: str, given: str) -> int | None:
    if given.strip().lower() == "none":
        return None
    if not given.strip().isdigit() or int(given) < 1:
        raise usage_error(f"--{option} '{given}' is not a limit; give a positive number, or "
                          "'none' to lift it")
    return int(given)


@tenants_app.command("limits")
def limits(ctx: typer.Context, tenant: TenantArgument,
           model: Annotated[str | None, typer.Option(
               "--model", metavar="MODEL",
               help="the tenant's limits on this model (on top of its own); default: its own")
           ] = None,
           requests_per_minute: LimitValue = None, tokens_per_minute: LimitValue = None,
           concurrent_requests: LimitValue = None, daily_tokens: LimitValue = None) -> None:
    """Set or lift a tenant's limits ('none' lifts one); the others stay. Without options,
    show them."""
    run = invocation(ctx)
    path = f"/tenants/{segment(tenant)}"
    current = run.client.request("GET", path)
    given = dict(zip(LIMIT_KINDS, (requests_per_minute, tokens_per_minute, concurrent_requests,
                                   daily_tokens), strict=True))
    changes = {kind: _limit(kind.replace("_", "-"), value) for kind, value in given.items()
               if value is not None}
    body = current.body
    if changes:
        model_limits = {name: _set(limits) for name, limits in body["model_limits"].items()}
        if model is None:
            patch: dict[str, Any] = {"limits": {**_set(body["limits"]), **changes}}
        else:
            model_limits[model] = {**model_limits.get(model, {}), **changes}
            patch = {"model_limits": {name: {k: v for k, v in limits.items() if v is not None}
                                      for name, limits in model_limits.items()}}
        if "limits" in patch:
            patch["limits"] = {k: v for k, v in patch["limits"].items() if v is not None}
        # If-Match: a change made meanwhile by someone else is not overwritten (412, exit 2).
        body = run.client.request("PATCH", path, json_body=patch,
                                  headers={"If-Match": current.headers["ETag"]}).body

    def human() -> None:
        rows = [["(all models)", *[cell(body["limits"].get(k)) for k in LIMIT_KINDS]]]
        rows += [[name, *[cell(limits.get(k)) for k in LIMIT_KINDS]]
                 for name, limits in sorted(body["model_limits"].items())]
        run.out.table(["SCOPE", "REQUESTS/MIN", "TOKENS/MIN", "IN FLIGHT", "TOKENS/DAY"], rows)

    run.out.present(body, human)


@tenants_app.command("usage")
def usage(ctx: typer.Context, tenant: TenantArgument,
          since: Annotated[str | None, typer.Option(
              "--since", metavar="TIME", help="ISO time, UTC (default: 24 hours ago)")] = None,
          until: Annotated[str | None, typer.Option(
              "--until", metavar="TIME", help="ISO time, UTC (default: now)")] = None,
          group_by: Annotated[str, typer.Option(
              "--group-by", metavar="model|hour|day", help="one row per model, hour or day")
          ] = "model") -> None:
    """A tenant's requests, prompt and generated tokens, and refusals by limit."""
    run = invocation(ctx)
    found = run.client.get(f"/tenants/{segment(tenant)}/usage",
                           {"since": since, "until": until, "group_by": group_by})

    def human() -> None:
        key = {"model": "model", "hour": "hour", "day": "day"}.get(group_by, "model")
        rows = [[cell(r[key]), r["requests"], r["prompt_tokens"], r["output_tokens"],
                 ", ".join(f"{k} {v}" for k, v in sorted(r["refusals"].items())) or "-"]
                for r in found["rows"]]
        totals = found["totals"]
        rows.append(["(total)", totals["requests"], totals["prompt_tokens"],
                     totals["output_tokens"],
                     ", ".join(f"{k} {v}" for k, v in sorted(totals["refusals"].items())) or "-"])
        run.out.table([key.upper(), "REQUESTS", "PROMPT TOKENS", "OUTPUT TOKENS", "REFUSED"],
                      rows)

    run.out.present(found, human)


def _set(limits: dict[str, Any]) -> dict[str, Any]:
    return {kind: value for kind, value in limits.items() if value is not None}


@tenants_app.command("delete")
def delete(ctx: typer.Context, tenant: TenantArgument) -> None:
    """Delete a tenant and all its keys."""
    run = invocation(ctx)
    run.client.delete(f"/tenants/{segment(tenant)}")
    run.out.present({"name": tenant, "deleted": True},
                    lambda: run.out.line(f"deleted tenant '{tenant}' and its keys"))


@keys_app.command("create")
def create_key(ctx: typer.Context, tenant: TenantArgument, name: Annotated[str, typer.Argument(
        metavar="NAME", help="who or what uses the key, e.g. the client application")]) -> None:
    """Create a key and print its secret: it is shown this once and never stored."""
    run = invocation(ctx)
    created = run.client.post(f"/tenants/{segment(tenant)}/keys", {"name": name})

    def human() -> None:
        run.out.note(f"created key {created['id']} '{created['name']}' for tenant '{tenant}'; "
                     "save the secret now, it is not shown again:")
        run.out.line(created["key"])

    run.out.present(created, human)


@keys_app.command("list")
def list_keys(ctx: typer.Context, tenant: TenantArgument, limit: Limit = 50, offset: Offset = 0
              ) -> None:
    """List a tenant's keys, revoked ones too (never a secret)."""
    run = invocation(ctx)
    page = run.client.get(f"/tenants/{segment(tenant)}/keys", {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["ID", "NAME", "PREFIX", "CREATED", "REVOKED"],
                      [[k["id"], k["name"], k["prefix"], when(k["created_at"]),
                        when(k["revoked_at"])] for k in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@keys_app.command("revoke")
def revoke_key(ctx: typer.Context, tenant: TenantArgument, key_id: Annotated[int, typer.Argument(
        metavar="ID", min=1, help="the key's id, as 'keys list' shows it")]) -> None:
    """Revoke a key: the gateway refuses it once it has the next routing table."""
    run = invocation(ctx)
    run.client.delete(f"/tenants/{segment(tenant)}/keys/{key_id}")
    run.out.present({"tenant": tenant, "id": key_id, "revoked": True},
                    lambda: run.out.line(f"revoked key {key_id} of tenant '{tenant}'"))
