"""``llmctl deployments``: serve an alias on a node, stop serving it, and where it runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.aliases import aliases_path
from control_plane.llmctl.commands.models import ModelArgument, show_page_position
from control_plane.llmctl.commands.operations import await_operation, show_operation
from control_plane.llmctl.commands.options import Limit, Offset, Timeout, Wait, wait_timeout
from control_plane.llmctl.errors import LlmctlError, usage_error
from control_plane.llmctl.exit_codes import ExitCode
from control_plane.llmctl.invocation import Invocation, invocation, segment
from control_plane.llmctl.output import Output, when

deployments_app = typer.Typer(help="Deployments: an alias served on a node.",
                              no_args_is_help=True)

AliasOption = Annotated[str, typer.Option("--alias", metavar="ALIAS", help="e.g. production")]
NodeOption = Annotated[str, typer.Option("--node", metavar="NODE",
                                         help="a registered node's name")]


def deployment_path(model: str, alias: str, node: str) -> str:
    return f"{aliases_path(model, alias)}/deployments/{segment(node)}"


def show_deployment(out: Output, deployment: dict[str, Any], title: str | None = None) -> None:
    out.fields([("id", deployment["id"]), ("model", deployment["model"]),
                ("alias", deployment["alias"]),
                ("node", deployment["node"]), ("state", deployment["state"]),
                ("serving_version", deployment["serving_version"]),
                ("wanted", deployment["wanted"]), ("triton_name", deployment["triton_name"]),
                ("error", deployment["error"]), ("updated_by", deployment["updated_by"]),
                ("updated", when(deployment["updated_at"]))], title)


def _change(run: Invocation, method: str, model: str, alias: str, node: str, wait: bool,
            timeout_s: float, done: str) -> None:
    path = deployment_path(model, alias, node)
    started = run.client.request(method, path).body
    if not wait:
        operation = started["operation"]
        run.out.present(started, lambda: show_operation(
            run.out, operation, f"started operation {operation['id']} ({operation['kind']}); "
                                f"follow it with 'llmctl operations wait {operation['id']}'"))
        return
    operation = await_operation(run, started["operation"], timeout_s)
    try:
        deployment = run.client.get(path)
    except LlmctlError as exc:
        # A removed deployment may be gone by now: what it was when the removal started stands.
        if exc.exit_code is not ExitCode.USAGE:
            raise
        deployment = started["deployment"]
    document = {"deployment": deployment, "operation": operation}
    run.out.present(document, lambda: show_deployment(run.out, deployment, done))


@deployments_app.command("deploy")
def deploy(ctx: typer.Context, model: ModelArgument, alias: AliasOption, node: NodeOption,
           wait: Wait = False, timeout: Timeout = None) -> None:
    """Serve an alias's version on a node (PENDING, LOADING, READY)."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    _change(run, "PUT", model, alias, node, wait, limit,
            f"alias '{alias}' of '{model}' is served on node '{node}'")


@deployments_app.command("remove")
def remove(ctx: typer.Context, model: ModelArgument, alias: AliasOption, node: NodeOption,
           wait: Wait = False, timeout: Timeout = None) -> None:
    """Stop serving an alias on a node: in-flight streams finish, then it unloads."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    _change(run, "DELETE", model, alias, node, wait, limit,
            f"alias '{alias}' of '{model}' is no longer served on node '{node}'")


@deployments_app.command("status")
def status(ctx: typer.Context, model: ModelArgument,
           alias: Annotated[str | None, typer.Option(
               "--alias", metavar="ALIAS", help="with --node: that one deployment")] = None,
           node: Annotated[str | None, typer.Option(
               "--node", metavar="NODE", help="only deployments on this node")] = None,
           limit: Limit = 50, offset: Offset = 0) -> None:
    """Where a model's aliases run, and in which state."""
    run = invocation(ctx)
    if alias is not None:
        if node is None:
            raise usage_error("--alias needs --node to name one deployment; or give only --node, "
                              "or neither, to list them")
        deployment = run.client.get(deployment_path(model, alias, node))
        run.out.present(deployment, lambda: show_deployment(run.out, deployment))
        return
    page = run.client.get("/deployments", {"model": model, "node": node, "limit": limit,
                                           "offset": offset})

    def human() -> None:
        run.out.table(["ALIAS", "NODE", "STATE", "SERVING", "WANTED", "ERROR", "UPDATED"],
                      [[d["alias"], d["node"], d["state"], d["serving_version"], d["wanted"],
                        d["error"], when(d["updated_at"])] for d in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)
