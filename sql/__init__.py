"""The schema as data: migrations/NNN_*.sql and functions/*.sql.

Not Python code: this marker lets pyproject ship the folder inside the wheel as the package
`pipeline.sql` (package-dir), so an installed chunkyard finds it with importlib.resources (see pipeline/db.py).
"""
