"""llmctl: the control plane's admin API for people and CI pipelines.

The URL and token come from --url/--token, else LLMCP_URL/LLMCP_TOKEN, else the TOML file at
$LLMCTL_CONFIG or ~/.config/llmctl/config.toml (keys url, token); the URL defaults to
http://127.0.0.1:8080. --json prints exactly one JSON document on stdout, also on failure. The
global options --url, --token and --json may stand anywhere on the command line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, NoReturn

import typer

from control_plane.llmctl.commands.adapters import adapters_app, deployment_adapters_app
from control_plane.llmctl.commands.aliases import aliases_app
from control_plane.llmctl.commands.deployments import deployments_app
from control_plane.llmctl.commands.models import models_app
from control_plane.llmctl.commands.operations import operations_app
from control_plane.llmctl.commands.promotions import promote, promotions_app, rollback
from control_plane.llmctl.commands.schema import schema_app
from control_plane.llmctl.commands.stats import stats
from control_plane.llmctl.commands.tenants import tenants_app
from control_plane.llmctl.commands.tokens import tokens_app
from control_plane.llmctl.commands.versions import versions_app
from control_plane.llmctl.errors import LlmctlError, usage_error
from control_plane.llmctl.exit_codes import ExitCode, exit_code_table
from control_plane.llmctl.invocation import Invocation
from control_plane.llmctl.output import Output, detect_mode

JSON_FLAG = "--json"
VALUED_GLOBAL_OPTIONS = ("--url", "--token")
# By convention, the exit status of a command stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130

# Plain Click help (rich_markup_mode=None): Typer's Rich help forces colour codes on some CI
# runners (GITHUB_ACTIONS), and help must read the same in a log as on a terminal.
app = typer.Typer(help=__doc__, epilog=exit_code_table(), no_args_is_help=True,
                  rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(models_app, name="models")
app.add_typer(versions_app, name="versions")
app.add_typer(aliases_app, name="aliases")
app.add_typer(deployments_app, name="deployments")
# Here rather than in deployments.py, which the adapters' commands import.
deployments_app.add_typer(deployment_adapters_app, name="adapters")
app.add_typer(adapters_app, name="adapters")
app.command("promote")(promote)
app.command("rollback")(rollback)
app.add_typer(promotions_app, name="promotions")
app.add_typer(operations_app, name="operations")
app.command("stats")(stats)
app.add_typer(tokens_app, name="tokens")
app.add_typer(tenants_app, name="tenants")
app.add_typer(schema_app, name="schema")


@app.callback()
def global_options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(
        metavar="URL", help="the control plane, e.g. https://llmcp.example.com "
                            "[default: $LLMCP_URL, the config file, http://127.0.0.1:8080]")
    ] = None,
    token: Annotated[str | None, typer.Option(
        metavar="TOKEN", help="an API token [default: $LLMCP_TOKEN, the config file]; prefer "
                              "the variable, as other users can see a command line")] = None,
    json_output: Annotated[bool, typer.Option(
        JSON_FLAG, help="print exactly one JSON document on stdout, the result or the error")
    ] = False,
) -> None:
    # main() read --json already, to answer usage errors in JSON too.
    run = ctx.find_object(Invocation)
    if run is not None:
        run.url_option, run.token_option = url, token


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """``args`` with the global options moved in front of the command, where Click reads them,
    so that ``llmctl models list --json`` works as well as ``llmctl --json models list``."""
    hoisted: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if arg == JSON_FLAG or arg.startswith(tuple(f"{o}=" for o in VALUED_GLOBAL_OPTIONS)):
            hoisted.append(arg)
        elif arg in VALUED_GLOBAL_OPTIONS and index + 1 < len(args):
            hoisted.extend(args[index:index + 2])
            index += 1
        else:
            rest.append(arg)
        index += 1
    return hoisted + rest


def run(args: Sequence[str]) -> int:
    """Run llmctl with ``args`` and return its exit code (``main`` exits with it)."""
    arguments = hoist_global_options(args)
    before_separator = arguments[:arguments.index("--")] if "--" in arguments else arguments
    out = Output(detect_mode(JSON_FLAG in before_separator))
    invocation = Invocation(out)
    command = typer.main.get_command(app)
    try:
        code = command.main(arguments, prog_name="llmctl", standalone_mode=False,
                            obj=invocation)
    except LlmctlError as exc:
        out.error(exc)
        return int(exc.exit_code)
    except typer.TyperException as exc:
        # Usage errors, bad option values, a missing argument; with no arguments, the help.
        if out.json:
            out.error(usage_error(exc.format_message()))
        else:
            exc.show()  # type: ignore[attr-defined]  # every one Typer raises is Click's kind
        return int(ExitCode.USAGE)
    except typer.Abort:
        out.note("aborted")
        return INTERRUPTED
    finally:
        invocation.close()
    # Click answers --help (and Typer a Ctrl-C) with an exit code; a command returns None.
    return code if isinstance(code, int) else int(ExitCode.SUCCESS)


def main() -> NoReturn:
    sys.exit(run(sys.argv[1:]))
