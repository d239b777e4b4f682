"""``llm-control-plane``: migrate the database, bootstrap API tokens, serve the admin API."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from fastapi import FastAPI
from sqlalchemy.engine import make_url

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
    secret_file: Annotated[Path | None, typer.Option(
        help="take the secret from this file (e.g. a mounted Kubernetes or compose secret) "
             "instead of generating one; nothing is printed, and running it again is a no-op")
    ] = None,
) -> None:
    """Create an API token and print its secret; it is shown this once and never stored."""
    settings = Settings()
    provided = None if secret_file is None else _read_secret(secret_file)
    engine = make_engine(settings.database_url)
    actor = Actor(name=CLI_ACTOR, scope=Scope.ADMIN)
    try:
        with transaction(make_session_factory(engine)) as session:
            if provided is not None:
                created = tokens.import_token(session, actor, name, scope, provided)
            else:
                issued = tokens.create_token(session, actor, name, scope)
    except ControlPlaneError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=1) from exc
    finally:
        engine.dispose()
    if provided is not None:
        typer.echo(f"token '{name}' with scope '{scope.value}' "
                   f"{'created' if created else 'already accepts that secret'} "
                   f"(secret from {secret_file})")
        return
    typer.echo(f"created token '{issued.name}' with scope '{issued.scope}'; save the secret now, "
               "it is not shown again:", err=True)
    typer.echo(issued.secret)


def _read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        typer.echo(f"error: cannot read the secret file {path}: {exc.strerror}", err=True)
        raise typer.Exit(code=1) from exc


@app.command()
def serve(
    access_log: Annotated[bool, typer.Option(
        help="log a line per request; off by default, as it cost ~2% of a version list's CPU "
             "(errors are logged either way)")] = False,
    workers: Annotated[int | None, typer.Option(
        min=1, max=64, help="worker processes (default LLMCP_WORKERS, 1); several use more "
                            "cores, and any number of replicas may share one database")] = None,
    host: Annotated[str | None, typer.Option(help="address to listen on (default LLMCP_HOST)")
                    ] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535,
                                             help="port (default LLMCP_PORT, 8080)")] = None,
) -> None:
    """Serve the admin REST API (migrate first)."""
    overrides: dict[str, object] = {key: value for key, value in (("host", host), ("port", port))
                                    if value is not None}
    settings = Settings.model_validate(overrides)
    count = workers or settings.workers
    if count > 1 and make_url(settings.database_url).get_backend_name() == "sqlite":
        # Measured (docs/benchmarks.md): one worker queues its writers in arrival order, several
        # race for SQLite's one write lock, and the slowest writes wait several times longer.
        typer.echo(f"warning: {count} workers on SQLite race for its one write lock, and the "
                   "slowest writes wait several times longer than with one worker; serve SQLite "
                   "with --workers 1 (LLMCP_WORKERS=1), or use PostgreSQL for several", err=True)
    if count == 1:
        uvicorn.run(worker_app(settings), host=settings.host, port=settings.port,
                    access_log=access_log)
        return
    # Each worker builds its own app (its engine, runner, leader contender) after the fork.
    # The workers read their settings from the environment: hand them the overrides there.
    os.environ.update({f"LLMCP_{key.upper()}": str(value) for key, value in overrides.items()})
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
