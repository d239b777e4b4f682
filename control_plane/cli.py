"""``llm-control-plane``: migrate the database, bootstrap API tokens, serve the admin API."""

from __future__ import annotations

import gc
from typing import Annotated

import typer
import uvicorn
from fastapi import FastAPI

from control_plane import migrate as migrations
from control_plane.app import create_app
from control_plane.auth import tokens
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import ensure_sqlite_directory, make_engine, make_session_factory, transaction
from control_plane.errors import ControlPlaneError
from control_plane.settings import Settings

app = typer.Typer(help=__doc__, no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")

# Commands run on the operator's machine with database access; the audit log names them so.
CLI_ACTOR = "cli"


@app.command()
def migrate() -> None:
    """Bring the database to the newest schema (alembic upgrade head)."""
    settings = Settings()
    ensure_sqlite_directory(settings.database_url)
    migrations.upgrade(settings.database_url)
    typer.echo("database is at the newest schema")


@tokens_app.command("create")
def create_token(
    name: Annotated[str, typer.Option(help="who or what uses the token (shown in the audit log)")],
    scope: Annotated[Scope, typer.Option(
        help="read < report (read, and report usage: a gateway's) < node (also register a "
             "node and take it out: a node agent's) < write < admin")
    ] = Scope.READ,
) -> None:
    """Create an API token and print its secret; it is shown this once and never stored."""
    settings = Settings()
    engine = make_engine(settings.database_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            issued = tokens.create_token(session, Actor(name=CLI_ACTOR, scope=Scope.ADMIN),
                                         name, scope)
    except ControlPlaneError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=1) from exc
    finally:
        engine.dispose()
    typer.echo(f"created token '{issued.name}' with scope '{issued.scope}'; save the secret now, "
               "it is not shown again:", err=True)
    typer.echo(issued.secret)


@app.command()
def serve(
    access_log: Annotated[bool, typer.Option(
        help="log a line per request; off by default, as it cost ~2% of a version list's CPU "
             "(errors are logged either way)")] = False,
    workers: Annotated[int | None, typer.Option(
        min=1, max=64, help="worker processes (default LLMCP_WORKERS, 1); several use more "
                            "cores, and any number of replicas may share one database")] = None,
) -> None:
    """Serve the admin REST API (migrate first)."""
    settings = Settings()
    count = workers or settings.workers
    if count == 1:
        uvicorn.run(worker_app(settings), host=settings.host, port=settings.port,
                    access_log=access_log)
        return
    # Each worker builds its own app (its engine, runner, leader contender) after the fork.
    uvicorn.run("control_plane.cli:worker_app", factory=True, workers=count,
                host=settings.host, port=settings.port, access_log=access_log)


def worker_app(settings: Settings | None = None) -> FastAPI:
    """The app of one API worker process."""
    application = create_app(settings or Settings())
    # What is loaded by now (modules, the app, SQLAlchemy's mappers) lives as long as the process.
    # Frozen, it is left out of garbage collection; otherwise each full collection scans all of it
    # while holding the GIL, stalling every request in flight at once.
    gc.collect()
    gc.freeze()
    return application
