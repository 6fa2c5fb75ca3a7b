"""Benchmarks that print tables; run each as `python -m bench.<name>` from the repository root."""
