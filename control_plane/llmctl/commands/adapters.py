"""``llmctl adapters``: LoRA adapters registered under a version; and ``llmctl deployments
adapters``: the adapters loaded into a deployment's engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.deployments import AliasOption, NodeOption, deployment_path
from control_plane.llmctl.commands.models import ModelArgument, show_page_position
from control_plane.llmctl.commands.operations import await_operation, show_operation
from control_plane.llmctl.commands.options import Limit, Offset, Timeout, Wait, wait_timeout
from control_plane.llmctl.commands.versions import NumberArgument
from control_plane.llmctl.invocation import Invocation, invocation, segment
from control_plane.llmctl.manifest_file import load_gates
from control_plane.llmctl.output import Output, when

adapters_app = typer.Typer(help="LoRA adapters, registered under a model version.",
                           no_args_is_help=True)
deployment_adapters_app = typer.Typer(
    help="LoRA adapters loaded into a deployment's engine, chosen per request with lora_name.",
    no_args_is_help=True)

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="the adapter's name")]


def _adapters(model: str, number: int) -> str:
    return f"/models/{segment(model)}/versions/{number}/adapters"


def show_adapter(out: Output, adapter: dict[str, Any], title: str | None = None) -> None:
    out.fields([("model", adapter["model"]), ("version", adapter["version"]),
                ("name", adapter["name"]), ("source", adapter["source"]),
                ("checksum", adapter["checksum"]), ("rank", adapter["rank"]),
                ("target_modules", ",".join(adapter["target_modules"])),
                ("base_model", adapter["base_model"]), ("created_by", adapter["created_by"]),
                ("created", when(adapter["created_at"]))], title)


@adapters_app.command("register")
def register(ctx: typer.Context, model: ModelArgument, number: NumberArgument,
             name: Annotated[str, typer.Option(
                 "--name", metavar="NAME", help="what clients send as lora_name")],
             source: Annotated[str, typer.Option(
                 "--source", metavar="DIR",
                 help="absolute path of the PEFT adapter directory (adapter_config.json, "
                      "adapter_model.safetensors) on the control plane's and nodes' disk")],
             gates: Annotated[Path | None, typer.Option(
                 "--gates", metavar="FILE", dir_okay=False,
                 help="what a promotion of the adapter runs (YAML or JSON: smoke, compare), "
                      "checked locally")] = None,
             ) -> None:
    """Register an adapter for a version; its config is checked against the version's engine."""
    run = invocation(ctx)
    body: dict[str, Any] = {"name": name, "source": source}
    if gates is not None:
        body["gates"] = load_gates(gates)
    adapter = run.client.post(_adapters(model, number), body)
    run.out.present(adapter, lambda: show_adapter(
        run.out, adapter, f"registered adapter '{name}' for version {number} of '{model}'"))


@adapters_app.command("list")
def list_adapters(ctx: typer.Context, model: ModelArgument, number: NumberArgument,
                  limit: Limit = 50, offset: Offset = 0) -> None:
    """List a version's adapters by name."""
    run = invocation(ctx)
    page = run.client.get(_adapters(model, number), {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["NAME", "RANK", "TARGETS", "BASE MODEL", "CREATED"],
                      [[a["name"], a["rank"], ",".join(a["target_modules"]), a["base_model"],
                        when(a["created_at"])] for a in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@adapters_app.command("show")
def show(ctx: typer.Context, model: ModelArgument, number: NumberArgument,
         name: NameArgument) -> None:
    """Show one adapter."""
    run = invocation(ctx)
    adapter = run.client.get(f"{_adapters(model, number)}/{segment(name)}")
    run.out.present(adapter, lambda: show_adapter(run.out, adapter))


@adapters_app.command("delete")
def delete(ctx: typer.Context, model: ModelArgument, number: NumberArgument,
           name: NameArgument) -> None:
    """Delete an adapter; refused (exit 6) while a deployment wants it."""
    run = invocation(ctx)
    run.client.delete(f"{_adapters(model, number)}/{segment(name)}")
    run.out.present({"model": model, "version": number, "name": name, "deleted": True},
                    lambda: run.out.line(f"deleted adapter '{name}' of version {number} of "
                                         f"'{model}'"))


def _wanted_path(run: Invocation, model: str, alias: str, node: str) -> str:
    deployment = run.client.get(deployment_path(model, alias, node))
    return f"/deployments/{deployment['id']}/adapters"


def show_wanted(out: Output, row: dict[str, Any], title: str | None = None) -> None:
    out.fields([("name", row["name"]), ("version", row["version"]), ("state", row["state"]),
                ("routed", row["routed"]), ("error", row["error"]), ("deployment", row["deployment_id"]),
                ("triton_name", row["triton_name"]), ("node", row["node"]),
                ("updated_by", row["updated_by"]), ("updated", when(row["updated_at"]))], title)


def _change(run: Invocation, method: str, wanted: str, path: str, body: dict[str, Any] | None,
            wait: bool, timeout_s: float, done: str) -> None:
    """Start a load or unload at ``path``; with ``wait``, show the adapter's state in the
    ``wanted`` list once the operation has finished."""
    started = run.client.request(method, path, json_body=body).body
    operation = started["operation"]
    if not wait:
        run.out.present(started, lambda: show_operation(
            run.out, operation, f"started operation {operation['id']} ({operation['kind']}); "
                                f"follow it with 'llmctl operations wait {operation['id']}'"))
        return
    finished = await_operation(run, operation, timeout_s)
    rows = run.client.get(wanted)
    row = next((r for r in rows if r["name"] == started["adapter"]["name"]), None)
    document = {"adapter": row, "operation": finished}
    run.out.present(document, lambda: show_wanted(run.out, row, done) if row is not None
                    else run.out.line(done))


@deployment_adapters_app.command("load")
def load(ctx: typer.Context, model: ModelArgument, name: NameArgument, alias: AliasOption,
         node: NodeOption,
         version: Annotated[int | None, typer.Option(
             "--version", min=1, metavar="N",
             help="the version it is registered under [default: the one the deployment "
                  "serves, the only one accepted]")] = None,
         wait: Wait = False, timeout: Timeout = None) -> None:
    """Load a registered adapter into a READY deployment's engine (loading, loaded)."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    body: dict[str, Any] = {"name": name} if version is None else {"name": name,
                                                                   "version": version}
    wanted = _wanted_path(run, model, alias, node)
    _change(run, "POST", wanted, wanted, body, wait, limit,
            f"adapter '{name}' is loaded on '{model}/{alias}' on node '{node}'")


@deployment_adapters_app.command("unload")
def unload(ctx: typer.Context, model: ModelArgument, name: NameArgument, alias: AliasOption,
           node: NodeOption, wait: Wait = False, timeout: Timeout = None) -> None:
    """Unload an adapter from a deployment's engine (unloading, then gone)."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    wanted = _wanted_path(run, model, alias, node)
    _change(run, "DELETE", wanted, f"{wanted}/{segment(name)}", None, wait, limit,
            f"adapter '{name}' is unloaded from '{model}/{alias}' on node '{node}'")


@deployment_adapters_app.command("list")
def list_wanted(ctx: typer.Context, model: ModelArgument, alias: AliasOption,
                node: NodeOption) -> None:
    """The adapters wanted on a deployment, with their state there."""
    run = invocation(ctx)
    rows = run.client.get(_wanted_path(run, model, alias, node))
    run.out.present(rows, lambda: run.out.table(
        ["NAME", "VERSION", "STATE", "ROUTED", "ERROR", "UPDATED"],
        [[r["name"], r["version"], r["state"], r["routed"], r["error"], when(r["updated_at"])]
         for r in rows]))
