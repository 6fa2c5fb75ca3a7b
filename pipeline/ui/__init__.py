"""`chunkyard ui`: a local, read-only web view of collections, documents and their chunks, search, and the
quality of runs over time. Routes in `app`, text cutting in `layout`, inline SVG plots in `plots`."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.ui.app import create_app

__all__ = ["create_app", "serve"]


def serve(url: str, *, settings: Settings, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the view with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(url, settings=settings), host=host, port=port, log_level="warning")
