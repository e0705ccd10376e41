"""Benchmarks the CLI runs (`tritonpkg bench ...`); bench/ holds the scripts that call them."""
