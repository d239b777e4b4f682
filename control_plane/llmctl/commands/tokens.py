"""``llmctl tokens``: API tokens (admin scope needed): create, list, revoke."""

from __future__ import annotations

from typing import Annotated

import typer

from control_plane.llmctl.commands.models import show_page_position
from control_plane.llmctl.commands.options import Limit, Offset
from control_plane.llmctl.invocation import invocation, segment
from control_plane.llmctl.output import when

tokens_app = typer.Typer(help="API tokens: who may call the control plane (admin only).",
                         no_args_is_help=True)

NameArgument = Annotated[str, typer.Argument(
    metavar="NAME", help="who or what uses the token (shown in the audit log)")]


@tokens_app.command("create")
def create(ctx: typer.Context, name: NameArgument,
           # Checked by the server, which owns the scopes: an unknown one is exit 2 naming them.
           scope: Annotated[str, typer.Option(
               help="read < report (read, and report usage: a gateway's) < write < admin")
           ] = "read") -> None:
    """Create a token and print its secret: it is shown this once and never stored."""
    run = invocation(ctx)
    created = run.client.post("/tokens", {"name": name, "scope": scope})

    def human() -> None:
        run.out.note(f"created token '{created['name']}' with scope '{created['scope']}'; save "
                     "the secret now, it is not shown again:")
        run.out.line(created["secret"])

    run.out.present(created, human)


@tokens_app.command("list")
def list_tokens(ctx: typer.Context, limit: Limit = 50, offset: Offset = 0) -> None:
    """List tokens: name, scope and when each was created (never a secret)."""
    run = invocation(ctx)
    page = run.client.get("/tokens", {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["NAME", "SCOPE", "CREATED"],
                      [[t["name"], t["scope"], when(t["created_at"])] for t in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@tokens_app.command("revoke")
def revoke(ctx: typer.Context, name: NameArgument) -> None:
    """Revoke a token: it stops authenticating with its next request."""
    run = invocation(ctx)
    run.client.delete(f"/tokens/{segment(name)}")
    run.out.present({"name": name, "revoked": True},
                    lambda: run.out.line(f"revoked token '{name}'"))
