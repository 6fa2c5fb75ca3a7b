"""Flow-backed commands run in this process when no Prefect server is there to record them (issue 26).

The same pipeline functions the flows wrap, with the flows' parameters, on the serial executor: no Prefect
imported and no temporary server started (about 20 s a command, against a second or two here). Which
commands run here is decided in one place, flows.server.where.
"""

from __future__ import annotations

from pipeline.model import Progress


def run_here(name: str, params: dict, progress: Progress) -> dict:
    """A flow's work by its short name (flows.run.FLOWS) as plain function calls; its summary."""
    from pipeline.config import Profile, Settings

    kw = dict(params)
    if kw.get("profile") is not None:  # the flows take the profile as JSON (a Prefect parameter)
        kw["profile"] = Profile.model_validate(kw["profile"])
    if name == "evaluate":
        from pipeline.evaluate.live import run_live_eval

        return run_live_eval(**kw, settings=Settings())
    from pipeline import ingest

    if name == "reindex" and kw.get("model") is not None:
        result = ingest.run_model_switch(**kw, progress=progress)
    else:
        run = {
            "ingest": ingest.run_ingest,
            "backfill": ingest.run_backfill,
            "reindex": ingest.run_reindex,
            "prune": ingest.run_prune,
        }[name]
        result = run(**kw, progress=progress)
    return result.summary(kw["collection"])
