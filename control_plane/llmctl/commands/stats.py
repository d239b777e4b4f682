"""``llmctl stats``: how a model's deployments serve, over a recent window (read scope)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from control_plane.llmctl.invocation import invocation, segment


def _ms(quantiles: dict[str, float | None]) -> str:
    """``p50/p95`` in milliseconds; ``-`` for a quantile with nothing counted."""
    return "/".join("-" if (seconds := quantiles[key]) is None else f"{seconds * 1000:.0f}"
                    for key in ("p50", "p95"))


def _row(label: list[str], stats: dict[str, Any] | None, why: str | None = None) -> list[str]:
    if stats is None:
        return [*label, why or "no figures", "", "", "", "", "", "", "", ""]
    errors = ", ".join(f"{k} {v:g}" for k, v in sorted(stats["errors"].items()) if v) or "-"
    waiting = sum(stats["waiting"].values())
    return [*label, f"{stats['requests_per_second']:.2f}", _ms(stats["queue_time_seconds"]),
            _ms(stats["time_to_first_token_seconds"]), _ms(stats["inter_token_latency_seconds"]),
            f"{stats['prompt_tokens_per_second']:.1f}",
            f"{stats['generated_tokens_per_second']:.1f}", errors, f"{waiting:g}",
            ", ".join(f"p{level} {count:g}" for level, count in stats["waiting"].items()
                      if count) or "-"]


def stats(ctx: typer.Context,
          model: Annotated[str, typer.Argument(metavar="MODEL", help="the model's name")],
          alias: Annotated[str | None, typer.Option(
              "--alias", metavar="ALIAS", help="only this alias's deployments")] = None,
          window: Annotated[str, typer.Option(
              "--window", metavar="DURATION", help="300, 300s, 5m or 1h")] = "5m") -> None:
    """Request rate, queue time, TTFT, inter-token latency (p50/p95, ms), tokens per second and
    errors per deployment and version over the window; what waits now by priority level."""
    run = invocation(ctx)
    found = run.client.get(f"/models/{segment(model)}/stats", {"alias": alias, "window": window})

    def human() -> None:
        rows = [_row([d["alias"], d["node"], str(d["version"] or "-")], d["stats"],
                     d["unavailable"]) for d in found["deployments"]]
        rows += [_row(["(version)", "", str(v)], s) for v, s in found["by_version"].items()]
        if found["total"] is not None:
            rows.append(_row(["(total)", "", ""], found["total"]))
        run.out.table(["ALIAS", "NODE", "VERSION", "REQ/S", "QUEUE MS", "TTFT MS", "ITL MS",
                       "PROMPT TOK/S", "GEN TOK/S", "ERRORS", "WAITING", "BY LEVEL"], rows)

    run.out.present(found, human)
