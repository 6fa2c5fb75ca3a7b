"""Faults, races and hostile input against the real CLI and a real Postgres: `python -m bench.faults`."""
