"""``llmctl promote``, ``llmctl rollback`` and ``llmctl promotions``: bringing a version to an
alias through gates and the zero-downtime swap, going back, and reading what happened."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from control_plane.llmctl.commands.aliases import aliases_path, show_moved
from control_plane.llmctl.commands.models import ModelArgument, show_page_position
from control_plane.llmctl.commands.operations import wait_for_operation
from control_plane.llmctl.commands.options import Limit, Offset, Timeout, Wait, wait_timeout
from control_plane.llmctl.errors import LlmctlError, usage_error
from control_plane.llmctl.exit_codes import ExitCode
from control_plane.llmctl.invocation import Invocation, invocation, segment
from control_plane.llmctl.manifest_file import load_gates, load_manifest, request_fields
from control_plane.llmctl.output import Output, Progress, cell, when
from control_plane.llmctl.waiting import Awaited, wait_until_finished

promotions_app = typer.Typer(help="Promotions: what each one did, step by step and gate by gate.",
                             no_args_is_help=True)

PromotionArgument = Annotated[str, typer.Argument(metavar="ID", help="the promotion's id")]
FINISHED = ("succeeded", "failed")


def show_promotion(out: Output, promotion: dict[str, Any], title: str | None = None) -> None:
    out.fields([
        ("id", promotion["id"]), ("model", promotion["model"]), ("alias", promotion["alias"]),
        ("version", promotion["version"]), ("from_version", promotion["from_version"]),
        ("adapter", promotion.get("adapter")), ("state", promotion["state"]), ("failed_step", promotion["failed_step"]),
        ("error", promotion["error"]), ("nodes", ", ".join(promotion["nodes"]) or "-"),
        ("requested_by", promotion["requested_by"]), ("ci_run_url", promotion["ci_run_url"]),
        ("git_sha", promotion["git_sha"]), ("created", when(promotion["created_at"])),
        ("finished", when(promotion["finished_at"])),
    ], title)
    if promotion["steps"]:
        out.table(["STEP", "STATE", "STARTED", "FINISHED", "DETAIL"],
                  [[s["name"], s["state"], when(s.get("started_at")),
                    when(s.get("finished_at")), s.get("detail")] for s in promotion["steps"]])
    if promotion["gate_results"]:
        out.table(["GATE", "KIND", "PHASE", "PASSED", "REASON"],
                  [[g["gate"], g["kind"], g["phase"],
                    "skipped" if g["passed"] is None else g["passed"], g.get("reason")]
                   for g in promotion["gate_results"]])


def _failed_gates(promotion: dict[str, Any]) -> list[dict[str, Any]]:
    return [gate for gate in promotion["gate_results"] if gate["passed"] is False]


def _show_failure(out: Output, promotion: dict[str, Any]) -> None:
    """The failed promotion, and each failed gate with what it sent, wanted and got."""
    show_promotion(out, promotion, f"promotion {promotion['id']} failed")
    for gate in _failed_gates(promotion):
        out.fields([("prompt", gate.get("prompt")), ("expectation", gate.get("expectation")),
                    ("actual", gate.get("actual")), ("reason", gate.get("reason"))],
                   f"failed gate {gate['gate']} ({gate['kind']}, on the {gate['phase']})")


def _failure(promotion: dict[str, Any]) -> LlmctlError:
    serving = (f"adapter '{promotion['adapter']}' is not routed on alias "
               f"'{promotion['alias']}'" if promotion.get("adapter") else
               f"version {promotion['from_version']} still serves alias '{promotion['alias']}'"
               if promotion["from_version"] is not None
               else f"alias '{promotion['alias']}' was not moved")
    gates = _failed_gates(promotion)
    failed_gates = (f"; failed gates: {', '.join(gate['gate'] for gate in gates)}"
                    if gates else "")
    step = cell(promotion["failed_step"])
    # The server's error may itself start with the step's name.
    error = (promotion["error"] or "no reason given").removeprefix(f"{step}: ")
    return LlmctlError(
        ExitCode.PROMOTION_FAILED, "PromotionFailed",
        f"promotion {promotion['id']} failed at step {step}: {error}{failed_gates}; {serving}",
        {"promotion_id": promotion["id"], "promotion": promotion})


def _show_progress(promotion: dict[str, Any], progress: Progress) -> None:
    running = next((step["name"] for step in promotion["steps"] if step["state"] == "running"),
                   None)
    at_step = f" (step {running})" if running else ""
    progress.update(f"promotion {promotion['id']} of '{promotion['model']}' to "
                    f"'{promotion['alias']}': {promotion['state']}{at_step}",
                    [(step["name"], step["state"]) for step in promotion["steps"]])


def _finish(run: Invocation, promotion: dict[str, Any], timeout_s: float) -> None:
    awaited = Awaited(kind="promotion", id=promotion["id"],
                      fetch=lambda: run.client.get(f"/promotions/{segment(promotion['id'])}"),
                      finished=lambda found: found["state"] in FINISHED, show=_show_progress,
                      follow_command=f"llmctl promotions wait {promotion['id']}")
    finished = wait_until_finished(run.out, awaited, timeout_s, first=promotion)
    if finished["state"] == "failed":
        if not run.out.json:
            _show_failure(run.out, finished)
        raise _failure(finished)
    outcome = (f"adapter '{finished['adapter']}' of version {finished['version']} is routed on "
               f"alias '{finished['alias']}' of '{finished['model']}'"
               if finished.get("adapter") else
               f"alias '{finished['alias']}' of '{finished['model']}' serves version "
               f"{finished['version']}")
    run.out.present(finished, lambda: show_promotion(
        run.out, finished, f"promotion {finished['id']} succeeded: {outcome}"))


def promote(ctx: typer.Context, model: ModelArgument,
            to: Annotated[str, typer.Option("--to", metavar="ALIAS",
                                            help="the alias to move, e.g. production")],
            version: Annotated[int | None, typer.Option(
                "--version", min=1, metavar="N", help="a registered version")] = None,
            manifest: Annotated[Path | None, typer.Option(
                "--manifest", metavar="FILE", dir_okay=False,
                help="a manifest to register first (YAML or JSON), checked locally")] = None,
            adapter: Annotated[str | None, typer.Option(
                "--adapter", metavar="NAME",
                help="promote this LoRA adapter of the version the alias serves instead: "
                     "loaded on the alias's deployments, gated, then routed")] = None,
            adapter_source: Annotated[str | None, typer.Option(
                "--adapter-source", metavar="DIR",
                help="with --adapter: register it first from this adapter directory")] = None,
            gates: Annotated[Path | None, typer.Option(
                "--gates", metavar="FILE", dir_okay=False,
                help="with --adapter-source: the adapter's gates (YAML or JSON: smoke, "
                     "compare), checked locally")] = None,
            node: Annotated[list[str] | None, typer.Option(
                "--node", metavar="NODE",
                help="a node to serve the alias on if it runs nowhere yet; repeat for more")
            ] = None,
            wait: Wait = False, timeout: Timeout = None,
            ci_run_url: Annotated[str | None, typer.Option(
                "--ci-run-url", metavar="URL", help="the CI run, recorded with the promotion")
            ] = None,
            git_sha: Annotated[str | None, typer.Option(
                "--git-sha", metavar="SHA", help="the commit, recorded with the promotion")
            ] = None) -> None:
    """Promote a version to an alias: deploy a candidate, run its gates, swap, check again.
    Any failure rolls back and the previous version keeps serving (exit 3 with --wait). With
    --adapter, promote a LoRA adapter onto the alias's deployments the same way."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    if [version, manifest, adapter].count(None) != 2:
        raise usage_error("give exactly one of --version N (a registered version), --manifest "
                          "FILE (a version to register first) and --adapter NAME (a LoRA "
                          "adapter of the version the alias serves)")
    if adapter is None and (adapter_source is not None or gates is not None):
        raise usage_error("--adapter-source and --gates go with --adapter NAME")
    if gates is not None and adapter_source is None:
        raise usage_error("--gates goes with --adapter-source: a registered adapter is promoted "
                          "with the gates it was registered with")
    body: dict[str, Any] = {"to": to, "nodes": node or []}
    if version is not None:
        body["version"] = version
    if manifest is not None:
        body["manifest"] = request_fields(load_manifest(manifest, model))
    if adapter is not None:
        body["adapter"] = {"name": adapter}
        if adapter_source is not None:
            body["adapter"]["source"] = adapter_source
        if gates is not None:
            body["adapter"]["gates"] = load_gates(gates)
    body.update({key: value for key, value in (("ci_run_url", ci_run_url),
                                               ("git_sha", git_sha)) if value is not None})
    promotion = run.client.post(f"/models/{segment(model)}/promotions", body)
    if wait:
        _finish(run, promotion, limit)
        return
    run.out.present(promotion, lambda: show_promotion(
        run.out, promotion, f"started promotion {promotion['id']} of '{model}' to '{to}'; "
                            f"follow it with 'llmctl promotions wait {promotion['id']}'"))


def rollback(ctx: typer.Context, model: ModelArgument,
             alias: Annotated[str, typer.Option("--alias", metavar="ALIAS",
                                                help="the alias to move back")],
             to: Annotated[int | None, typer.Option(
                 "--to", min=1, metavar="N",
                 help="the version to go back to [default: the one before the last move]")
             ] = None,
             wait: Wait = False, timeout: Timeout = None) -> None:
    """Move an alias back (through the zero-downtime swap where it is deployed)."""
    run = invocation(ctx)
    limit = wait_timeout(wait, timeout)
    answer = run.client.request("POST", f"{aliases_path(model, alias)}/rollback",
                                json_body={} if to is None else {"to": to})
    if answer.status_code == 202:
        wait_for_operation(run, answer.body, wait, limit)
        return
    run.out.present(answer.body, lambda: show_moved(run.out, answer.body))


@promotions_app.command("list")
def list_promotions(ctx: typer.Context, model: ModelArgument,
                    state: Annotated[str | None, typer.Option(
                        help="pending, running, succeeded or failed")] = None,
                    alias: Annotated[str | None, typer.Option(help="only to this alias")] = None,
                    ci_run_url: Annotated[str | None, typer.Option(
                        "--ci-run-url", metavar="URL", help="only from this CI run")] = None,
                    limit: Limit = 50, offset: Offset = 0) -> None:
    """List a model's promotions, newest first."""
    run = invocation(ctx)
    page = run.client.get(f"/models/{segment(model)}/promotions",
                          {"state": state, "alias": alias, "ci_run_url": ci_run_url,
                           "limit": limit, "offset": offset})

    def human() -> None:
        run.out.table(["ID", "ALIAS", "VERSION", "FROM", "STATE", "FAILED STEP", "BY",
                       "CREATED"],
                      [[p["id"], p["alias"], p["version"], p["from_version"], p["state"],
                        p["failed_step"], p["requested_by"], when(p["created_at"])]
                       for p in page["items"]])
        show_page_position(run.out, page)

    run.out.present(page, human)


@promotions_app.command("show")
def show(ctx: typer.Context, promotion_id: PromotionArgument) -> None:
    """Show a promotion: its steps and every gate's result."""
    run = invocation(ctx)
    promotion = run.client.get(f"/promotions/{segment(promotion_id)}")
    run.out.present(promotion, lambda: show_promotion(run.out, promotion))


@promotions_app.command("wait")
def wait(ctx: typer.Context, promotion_id: PromotionArgument, timeout: Timeout = None) -> None:
    """Wait for a promotion to finish: exit 0 if it succeeded, 3 if it failed, 4 on timeout."""
    run = invocation(ctx)
    limit = wait_timeout(True, timeout)
    _finish(run, run.client.get(f"/promotions/{segment(promotion_id)}"), limit)
