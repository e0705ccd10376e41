"""Local stand-ins for remote services, shared by the tests and the benchmarks (bench/): they start real
servers (moto's S3 API) on loopback, so both exercise the same client code a deployment does. Nothing in
the toolkit's commands imports this package; it needs the dev extra (`pip install -e '.[dev]'`)."""
