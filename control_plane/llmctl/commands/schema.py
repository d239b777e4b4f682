"""``llmctl schema``: the JSON Schemas a pipeline checks its files and llmctl's output against."""

from __future__ import annotations

import typer

from control_plane.llmctl.errors import ERROR_DOCUMENT_SCHEMA
from control_plane.llmctl.invocation import invocation

schema_app = typer.Typer(help="JSON Schemas, printed as JSON (no server needed).",
                         no_args_is_help=True)


@schema_app.command("manifest")
def manifest(ctx: typer.Context) -> None:
    """The version manifest's schema, for editors and CI to check manifest files with."""
    # Imported here for the reason given in manifest_file.load_manifest.
    from control_plane.promotions.manifest import manifest_json_schema

    invocation(ctx).out.schema(manifest_json_schema())


@schema_app.command("error")
def error(ctx: typer.Context) -> None:
    """The schema of the document --json prints when a command fails (exit code not 0)."""
    invocation(ctx).out.schema(ERROR_DOCUMENT_SCHEMA)
