"""``llmctl models``: create, list and show models."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.options import LabelOption, Limit, Offset, parse_labels
from control_plane.llmctl.invocation import invocation, segment
from control_plane.llmctl.output import Output, labels, when

models_app = typer.Typer(help="Models: the names versions are registered under.",
                         no_args_is_help=True)

ModelArgument = Annotated[str, typer.Argument(metavar="MODEL", help="the model's name")]


def show_model(out: Output, model: dict[str, Any], title: str | None = None) -> None:
    out.fields([("name", model["name"]), ("description", model["description"] or "-"),
                ("labels", labels(model["labels"])), ("created", when(model["created_at"])),
                ("updated", when(model["updated_at"]))], title)


@models_app.command("create")
def create_model(ctx: typer.Context, name: ModelArgument,
                 description: Annotated[str, typer.Option(help="what the model is for")] = "",
                 label: LabelOption = None) -> None:
    """Create a model."""
    run = invocation(ctx)
    model = run.client.post("/models", {"name": name, "description": description,
                                        "labels": parse_labels(label)})
    run.out.present(model, lambda: show_model(run.out, model, f"created model '{model['name']}'"))


@models_app.command("list")
def list_models(ctx: typer.Context,
                label: Annotated[list[str] | None, typer.Option(
                    "--label", metavar="KEY=VALUE",
                    help="only models with this label; repeat to require several")] = None,
                limit: Limit = 50, offset: Offset = 0) -> None:
    """List models by name."""
    run = invocation(ctx)
    page = run.client.get("/models", {"label": label or None, "limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["NAME", "DESCRIPTION", "LABELS", "CREATED"],
                      [[m["name"], m["description"], labels(m["labels"]), when(m["created_at"])]
                       for m in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@models_app.command("show")
def show(ctx: typer.Context, name: ModelArgument) -> None:
    """Show one model."""
    run = invocation(ctx)
    model = run.client.get(f"/models/{segment(name)}")
    run.out.present(model, lambda: show_model(run.out, model))


def show_page_position(out: Output, page: dict[str, Any]) -> None:
    """Below a table: how much of the whole list it is, and how to see the rest."""
    shown, total, offset = len(page["items"]), page["total"], page["offset"]
    if shown < total:
        out.note(f"{offset + 1 if shown else offset}-{offset + shown} of {total}; "
                 f"see more with --offset {offset + shown}")
