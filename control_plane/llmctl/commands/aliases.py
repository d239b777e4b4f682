"""``llmctl aliases``: the names clients call (production, staging) and the versions behind them."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.models import ModelArgument, show_page_position
from control_plane.llmctl.commands.operations import wait_for_operation
from control_plane.llmctl.commands.options import Limit, Offset, Timeout, Wait, wait_timeout
from control_plane.llmctl.invocation import invocation, segment
from control_plane.llmctl.output import Output, when

aliases_app = typer.Typer(help="Aliases: movable names for a model's versions.",
                          no_args_is_help=True)

AliasArgument = Annotated[str, typer.Argument(metavar="ALIAS", help="e.g. production")]


def aliases_path(model: str, alias: str | None = None) -> str:
    path = f"/models/{segment(model)}/aliases"
    return path if alias is None else f"{path}/{segment(alias)}"


def show_alias(out: Output, alias: dict[str, Any], title: str | None = None) -> None:
    out.fields([("model", alias["model"]), ("alias", alias["name"]),
                ("version", alias["version"]), ("updated_by", alias["updated_by"]),
                ("updated", when(alias["updated_at"]))], title)


def show_moved(out: Output, alias: dict[str, Any]) -> None:
    show_alias(out, alias, f"alias '{alias['name']}' of '{alias['model']}' now points at "
                           f"version {alias['version']}")


@aliases_app.command("list")
def list_aliases(ctx: typer.Context, model: ModelArgument) -> None:
    """List a model's aliases and the versions they point at."""
    run = invocation(ctx)
    found = run.client.get(aliases_path(model))
    run.out.present(found, lambda: run.out.table(
        ["ALIAS", "VERSION", "UPDATED BY", "UPDATED"],
        [[a["name"], a["version"], a["updated_by"], when(a["updated_at"])] for a in found]))


@aliases_app.command("show")
def show(ctx: typer.Context, model: ModelArgument, alias: AliasArgument) -> None:
    """Show which version an alias points at."""
    run = invocation(ctx)
    found = run.client.get(aliases_path(model, alias))
    run.out.present(found, lambda: show_alias(run.out, found))


@aliases_app.command("set")
def set_alias(ctx: typer.Context, model: ModelArgument, alias: AliasArgument,
              version: Annotated[int, typer.Option("--version", min=1, metavar="N",
                                                   help="the version to point at")],
              wait: Wait = False, timeout: Timeout = None) -> None:
    """Point an alias at a version, creating it on first use. A deployed alias moves through a
    zero-downtime swap (an operation; --wait waits for it)."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    answer = run.client.request("PUT", aliases_path(model, alias), json_body={"version": version})
    if answer.status_code == 202:
        wait_for_operation(run, answer.body, wait, limit)
        return
    run.out.present(answer.body, lambda: show_moved(run.out, answer.body))


@aliases_app.command("delete")
def delete(ctx: typer.Context, model: ModelArgument, alias: AliasArgument) -> None:
    """Remove an alias (refused while it is deployed); its history stays in the audit log."""
    run = invocation(ctx)
    run.client.delete(aliases_path(model, alias))
    run.out.present({"model": model, "alias": alias, "deleted": True},
                    lambda: run.out.line(f"deleted alias '{alias}' of '{model}'"))


@aliases_app.command("history")
def history(ctx: typer.Context, model: ModelArgument, alias: AliasArgument, limit: Limit = 50,
            offset: Offset = 0) -> None:
    """Every move of an alias, newest first."""
    run = invocation(ctx)
    page = run.client.get(f"{aliases_path(model, alias)}/history",
                          {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["FROM", "TO", "MOVED BY", "MOVED"],
                      [[m["from_version"], m["to_version"], m["moved_by"], when(m["moved_at"])]
                       for m in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)
