"""Differential corpus for `tritonpkg validate`: many model configurations, each loaded in the real
Triton 2.51 server and checked by `validate_repository`; the server's verdict is the ground truth.

- `corpus.py`: the deterministic generator of cases (real configs mutated field by field).
- `run.py`: loads every case in one real server, runs validate per case, compares, reports.
- `KNOWN_DISAGREEMENTS.md`: every case where validate and the server disagree, with the reason.
"""
