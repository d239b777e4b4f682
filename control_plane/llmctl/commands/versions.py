"""``llmctl versions``: register versions from a manifest file, list, show, validate, archive."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.models import ModelArgument, show_page_position
from control_plane.llmctl.commands.operations import wait_for_operation
from control_plane.llmctl.commands.options import Limit, Offset, Timeout, Wait, wait_timeout
from control_plane.llmctl.errors import LlmctlError
from control_plane.llmctl.exit_codes import ExitCode
from control_plane.llmctl.invocation import invocation, segment
from control_plane.llmctl.manifest_file import load_manifest, request_fields
from control_plane.llmctl.output import Output, cell, labels, when

versions_app = typer.Typer(help="Versions of a model: registered from a manifest, immutable.",
                           no_args_is_help=True)

NumberArgument = Annotated[int, typer.Argument(metavar="N", min=1, help="the version number")]
ManifestFile = Annotated[Path, typer.Option(
    "--file", "-f", metavar="FILE", dir_okay=False,
    help="the version manifest, YAML or JSON (its schema: 'llmctl schema manifest')")]


def show_version(out: Output, version: dict[str, Any], title: str | None = None) -> None:
    out.fields([
        ("model", version["model"]), ("number", version["number"]), ("state", version["state"]),
        ("source", version["source"]), ("checksum", version["checksum"]),
        ("engine_args", version["engine_args"]), ("triton_config", version["triton_config"]),
        ("resources", version["resources"]), ("gates", version["gates"]),
        ("labels", labels(version["labels"])), ("created_by", version["created_by"]),
        ("created", when(version["created_at"])), ("updated", when(version["updated_at"])),
    ], title)


def _versions(model: str) -> str:
    return f"/models/{segment(model)}/versions"


@versions_app.command("register")
def register(ctx: typer.Context, model: ModelArgument, file: ManifestFile,
             dry_run: Annotated[bool, typer.Option(
                 "--dry-run", help="have the server check the manifest; register nothing")
             ] = False) -> None:
    """Register a version from a manifest file (checked locally first)."""
    run = invocation(ctx)
    body = request_fields(load_manifest(file, model))
    if not dry_run:
        version = run.client.post(_versions(model), body)
        run.out.present(version, lambda: show_version(
            run.out, version, f"registered version {version['number']} of '{model}'"))
        return
    answer = run.client.request("POST", _versions(model), json_body=body,
                                params={"dry_run": "true"})
    if answer.status_code != 200:
        # A server from before dry runs ignores the parameter and registers the version.
        raise LlmctlError(
            ExitCode.USAGE, "DryRunUnsupported",
            f"the server does not know dry runs and registered version "
            f"{cell((answer.body or {}).get('number'))} of '{model}'; archive it with "
            f"'llmctl versions archive {model} N' if it is not wanted",
            {"version": answer.body})
    preview = answer.body
    run.out.present(preview, lambda: show_version(
        run.out, preview, f"dry run: the server accepts this manifest for '{model}'; nothing "
                          "was registered"))


@versions_app.command("list")
def list_versions(ctx: typer.Context, model: ModelArgument, limit: Limit = 50,
                  offset: Offset = 0) -> None:
    """List a model's versions, newest first."""
    run = invocation(ctx)
    page = run.client.get(_versions(model), {"limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["N", "STATE", "SOURCE", "CHECKSUM", "LABELS", "CREATED"],
                      [[v["number"], v["state"], v["source"], (v["checksum"] or "-")[:12],
                        labels(v["labels"]), when(v["created_at"])] for v in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@versions_app.command("show")
def show(ctx: typer.Context, model: ModelArgument, number: NumberArgument) -> None:
    """Show one version in full."""
    run = invocation(ctx)
    version = run.client.get(f"{_versions(model)}/{number}")
    run.out.present(version, lambda: show_version(run.out, version))


@versions_app.command("validate")
def validate(ctx: typer.Context, model: ModelArgument, number: NumberArgument,
             wait: Wait = False, timeout: Timeout = None) -> None:
    """Check a version's files, checksum and architecture; it becomes validated on success."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    operation = run.client.post(f"{_versions(model)}/{number}/validate")
    wait_for_operation(run, operation, wait, limit)


@versions_app.command("archive")
def archive(ctx: typer.Context, model: ModelArgument, number: NumberArgument) -> None:
    """Archive a version: it stays readable but can no longer be promoted or deployed."""
    run = invocation(ctx)
    version = run.client.patch(f"{_versions(model)}/{number}", {"state": "archived"})
    run.out.present(version, lambda: run.out.line(
        f"archived version {version['number']} of '{model}'"))
