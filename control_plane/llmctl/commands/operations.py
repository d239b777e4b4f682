"""``llmctl operations``: show or wait for an operation (a validation, a deployment, a swap), and
the waiting every command with ``--wait`` on an operation shares."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.options import Timeout, wait_timeout
from control_plane.llmctl.errors import LlmctlError
from control_plane.llmctl.exit_codes import ExitCode
from control_plane.llmctl.invocation import Invocation, invocation, segment
from control_plane.llmctl.output import Output, Progress, when
from control_plane.llmctl.waiting import Awaited, wait_until_finished

operations_app = typer.Typer(help="Operations: server-side work that a 202 answer started.",
                             no_args_is_help=True)

OperationArgument = Annotated[str, typer.Argument(metavar="ID", help="the operation's id")]
FINISHED = ("succeeded", "failed")


def show_operation(out: Output, operation: dict[str, Any], title: str | None = None) -> None:
    out.fields([
        ("id", operation["id"]), ("kind", operation["kind"]), ("status", operation["status"]),
        ("target", f"{operation['target_type']} {operation['target']}"),
        ("error", operation["error"]), ("result", operation["result"]),
        ("created_by", operation["created_by"]), ("created", when(operation["created_at"])),
        ("started", when(operation["started_at"])), ("finished", when(operation["finished_at"])),
    ], title)


def _show_progress(operation: dict[str, Any], progress: Progress) -> None:
    progress.update(f"operation {operation['id']} ({operation['kind']} of "
                    f"{operation['target']}): {operation['status']}")


def await_operation(run: Invocation, operation: dict[str, Any], timeout_s: float
                    ) -> dict[str, Any]:
    """The operation once it has succeeded; exit 3 if it failed, 4 on timeout."""
    awaited = Awaited(kind="operation", id=operation["id"],
                      fetch=lambda: run.client.get(f"/operations/{segment(operation['id'])}"),
                      finished=lambda found: found["status"] in FINISHED, show=_show_progress,
                      follow_command=f"llmctl operations wait {operation['id']}")
    finished = wait_until_finished(run.out, awaited, timeout_s, first=operation)
    if finished["status"] == "failed":
        raise LlmctlError(ExitCode.PROMOTION_FAILED, "OperationFailed",
                          f"operation {finished['id']} ({finished['kind']} of "
                          f"{finished['target']}) failed: {finished['error'] or 'no reason given'}",
                          {"operation": finished})
    return finished


def wait_for_operation(run: Invocation, operation: dict[str, Any], wait: bool,
                       timeout_s: float) -> None:
    """Print an operation a command started, or with ``wait`` the operation once finished."""
    if wait:
        finished = await_operation(run, operation, timeout_s)
        run.out.present(finished, lambda: show_operation(
            run.out, finished, f"operation {finished['id']} ({finished['kind']}) succeeded"))
        return
    run.out.present(operation, lambda: show_operation(
        run.out, operation, f"started operation {operation['id']} ({operation['kind']}); "
                            f"follow it with 'llmctl operations wait {operation['id']}'"))


@operations_app.command("show")
def show(ctx: typer.Context, operation_id: OperationArgument) -> None:
    """Show an operation as it stands."""
    run = invocation(ctx)
    operation = run.client.get(f"/operations/{segment(operation_id)}")
    run.out.present(operation, lambda: show_operation(run.out, operation))


@operations_app.command("wait")
def wait(ctx: typer.Context, operation_id: OperationArgument, timeout: Timeout = None) -> None:
    """Wait for an operation to finish: exit 0 if it succeeded, 3 if it failed, 4 on timeout."""
    run = invocation(ctx)
    limit = wait_timeout(True, timeout)
    operation = run.client.get(f"/operations/{segment(operation_id)}")
    wait_for_operation(run, operation, True, limit)
