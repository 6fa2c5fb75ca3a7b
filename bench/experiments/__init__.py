"""One-off experiments whose answer is already in the code (README.md here): `python -m bench.experiments.<name>`."""
