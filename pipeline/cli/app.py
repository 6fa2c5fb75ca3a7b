"""The `chunkyard` app: the Typer app, the options every command shares, how a command runs and prints, and
the entry point (errors become one line and an exit code). The commands are in the modules beside it."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline import console
from pipeline.console import err, out
from pipeline.errors import ChunkyardError, ConfigError

if TYPE_CHECKING:  # pydantic-settings and the profile models load on use: `--help` needs neither
    from pipeline.cli.signals import Interrupted
    from pipeline.config import Profile, Settings

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Document ingestion into Postgres + pgvector."
)
db_app = typer.Typer(no_args_is_help=True, help="The database: migrate, start, stop, url.")
app.add_typer(db_app, name="db")
server_app = typer.Typer(no_args_is_help=True, help="The local Prefect server: start, stop, url.")
app.add_typer(server_app, name="server")

EXIT_OK, EXIT_FAILED_FILES, EXIT_ERROR = 0, 1, 2


def _settings() -> Settings:
    from pipeline.config import Settings

    return Settings()


def _profile(
    profile: Path | None, strategy: str | None, params: list[str] | None, language: str | None = None
) -> Profile:
    """The profile a command runs with: a strategy for every type, or a TOML file, or the default; with
    --language, that language for every document (instead of the profile's)."""
    prof = _base_profile(profile, strategy, params)
    if language is None:
        return prof
    from pipeline.language import check_code

    try:
        return prof.model_copy(update={"language": check_code(language), "languages": {}})
    except ValueError as exc:
        raise ConfigError(f"--language: {exc}") from exc


def _base_profile(profile: Path | None, strategy: str | None, params: list[str] | None) -> Profile:
    from pipeline.config import load_profile, strategy_profile

    if strategy:
        kv = {}
        for item in params or []:
            if "=" not in item:
                raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
            k, v = item.split("=", 1)
            try:
                kv[k] = json.loads(v)  # numbers, booleans, lists
            except json.JSONDecodeError:
                kv[k] = v  # plain strings such as language=tr
        return strategy_profile(strategy, **kv)
    return load_profile(profile)


#: Options several commands share, declared once.
def _collection(name: str) -> str:
    from pipeline.config import check_collection_name

    return check_collection_name(name)


CollectionOpt = Annotated[str, typer.Option("--collection", "-c", callback=_collection)]
ProfileOpt = Annotated[Path | None, typer.Option(help="Chunking profile (TOML).")]
StrategyOpt = Annotated[str | None, typer.Option(help="One strategy for every document type.")]
ParamOpt = Annotated[list[str] | None, typer.Option(help="Strategy parameter NAME=VALUE (repeatable).")]
LanguageOpt = Annotated[
    str | None,
    typer.Option(help="The documents' language (ISO 639-1: de, da, zh, ...) instead of detecting it ('auto')."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")]
FollowOpt = Annotated[
    bool | None,
    typer.Option(
        "--follow-external-links/--no-follow-external-links",
        help="Ingest what links inside the folders point to outside them (default: report, skip).",
    ),
]
_Workers = Annotated[
    int, typer.Option(min=0, help="Local Dask worker processes (0: threads here; CHUNKYARD_DASK_WORKERS).")
]
_DaskAddress = Annotated[
    str | None, typer.Option(help="Dask scheduler to run tasks on, tcp://host:8786 (CHUNKYARD_DASK_ADDRESS).")
]


# ------------------------------------------------------------------------------------------- runs


def _run(call: Callable[[console.Bars], dict], *, as_json: bool) -> None:
    """Run with progress bars, print problems and the summary (or JSON); exit 1 when any file failed."""
    bars = console.Bars(quiet=as_json)
    with bars.shown():
        result = call(bars)
    console.problems(result)
    if os.environ.get("PREFECT_API_URL") and result.get("flow_run_id") and not as_json:
        err.print(f"flow run {result['flow_run_id']} on {os.environ['PREFECT_API_URL']}", highlight=False)
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        console.summary(result)
    raise typer.Exit(EXIT_FAILED_FILES if result["errors"] else EXIT_OK)


def _flow(
    name: str, params: dict, *, workers: int = 0, dask_address: str | None = None, prefect: bool | None = None
):
    """A call that runs a flow: on the Prefect server flows.server.where picks, or here without Prefect."""

    def call(bars: console.Bars) -> dict:
        from flows.server import preset_api_url, where

        s = _settings()
        dask = workers or dask_address or s.dask_workers or s.dask_address  # Dask workers report to Prefect
        server = where(s.data_dir, prefect=prefect, dask=bool(dask))
        if not server.prefect:
            from pipeline.cli.here import run_here  # noqa: I001 - no Prefect on this path
            return run_here(name, params, bars)
        preset_api_url(server)  # set before Prefect is imported (it reads it once)
        from flows import quiet_console
        from flows.run import run_flow

        _preflight(
            params.get("collection") if name in ("reindex", "prune") else None,
            embeds=name in ("ingest", "backfill"),
        )
        if not _debug():
            quiet_console()
        return run_flow(name, params, workers=workers, address=dask_address, progress=bars)

    return call


def _preflight(collection: str | None, *, embeds: bool = False) -> None:
    """Reach the database (and find the collection; check the embedding backend can run) before Prefect
    starts: its errors are one line, without a temporary server started for nothing."""
    from pipeline import db, store

    if embeds:
        from pipeline.embed import key_for

        key_for(_settings())  # a backend without its extra installed: `pip install 'chunkyard[onnx]'`

    with db.connection(db.database_url()) as conn:
        if collection is not None and store.get_collection(conn, collection) is None:
            raise ConfigError(
                f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
            )


def _check_model(model: str) -> None:
    """A model named by a path must be a folder that is there (nothing is downloaded at run time): said
    before anything runs, a dry run included."""
    from pipeline.embed.meta import model_path

    path = Path(model_path(model)).expanduser()
    looks_like_a_path = model.startswith(("/", ".", "~")) or path.exists()
    if looks_like_a_path and not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        why = "no such folder" if not path.exists() else "not a sentence-transformers model folder"
        raise ConfigError(f"--model {model}: {why} (give the folder of a model saved with sentence-transformers)")


def _debug() -> bool:
    return bool(os.environ.get("CHUNKYARD_DEBUG"))


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and Prefect's own logs.")] = False,
) -> None:
    """Document ingestion into Postgres + pgvector."""
    if debug:
            os.environ["CHUNKYARD_DEBUG"] = "1"


# ---------------------------------------------------------------------------------------- entry


def main() -> None:
    """Console entry point: errors become one clear line and an exit code, not a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from pipeline.cli import signals
    from pipeline.errors import TransientError

    try:
        try:
            with signals.interruptible():
                rv = app(standalone_mode=False)
        finally:  # typer turns the KeyboardInterrupt into exit 130, Prefect into a crash: ask what came
            if (sig := signals.received()) is not None:
                _interrupted(sig)
        if isinstance(rv, int):
            sys.exit(rv)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (ChunkyardError, TransientError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        err.print("interrupted: what was committed stays; run the same command again to finish")
        sys.exit(130)
    except Exception as e:  # usage errors (typer's own click), a lost database, a bug
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()  # type: ignore[attr-defined]
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        if type(e).__name__ == "Abort":
            sys.exit(130)
        if _debug():
            raise
        _fail(_one_line(e))


def _interrupted(e: Interrupted) -> None:
    """A signal ended the command: the run's row is already marked crashed (its `with Run` block saw the
    exception); stop the Prefect server this command started, print one line, exit 128 + the signal."""
    from flows import stop_own_servers
    from pipeline.cli.signals import documents_stored, exit_now, note

    stored = documents_stored()
    what = f"{stored} documents stored" if stored is not None else "what was committed stays"
    line = note() or f"{what}, run it again to resume"
    err.print(f"interrupted by {e.name}; {line}", highlight=False, soft_wrap=True)
    stop_own_servers()
    exit_now(e.exit_code)


def _fail(message: str) -> None:
    """One line on stderr, exit 2 (usage, configuration or database error); a message of several lines
    (libpq's "connection refused" adds a hint on a second one) is joined into one."""
    from rich.markup import escape

    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    err.print(f"[red]error[/]: {escape(line)}", highlight=False, soft_wrap=True)
    sys.exit(EXIT_ERROR)


def _one_line(e: BaseException) -> str:
    """What went wrong, without a stack: a lost database says so and how to resume."""
    import psycopg

    first = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, psycopg.OperationalError | psycopg.errors.AdminShutdown):
        return (
            f"lost the database connection ({first}); nothing already stored was lost (documents are "
            "committed one by one): run the same command again when the database is back"
        )
    if isinstance(e, psycopg.Error):
        return f"database error: {type(e).__name__}: {first}"
    return f"unexpected {type(e).__name__}: {first} (run with --debug for the traceback)"
