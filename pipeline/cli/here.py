"""Flow-backed commands run in this process when no Prefect server is there to record them (issue 26).

The same pipeline functions the flows wrap, with the flows' parameters, on the serial executor: no Prefect
imported and no temporary server started (about 20 s a command, against a second or two here). Which
commands run here is decided in one place, flows.server.where.
"""

from __future__ import annotations

from pipeline.model import Progress


def run_here(name: str, params: dict, progress: Progress) -> dict:
    """A flow's work by its short name (flows.run.FLOWS) as plain function calls; its summary. The flow's
    parameters make the same typed request the flow would (`pipeline.requests`)."""
    from pipeline.config import Settings

    if name == "evaluate":
        from pipeline.evaluate.live import run_live_eval

        return run_live_eval(**params, settings=Settings())
    from pipeline import ingest, requests

    request = requests.flow_request(name, params)  # the profile as JSON, as a flow takes it: validated here
    return ingest.run_request(request, progress=progress).summary(request.collection)
