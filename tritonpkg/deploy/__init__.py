"""Rollouts: a release built once (release.py), a strategy chosen from what is live (strategy.py, pure) and
planned as steps (plan.py, pure), carried out by an executor (executor.py) through a target driver (driver.py:
the core Driver protocol and optional capabilities; drivers/local.py: tritonservers behind HAProxy, whose life
cycle is drivers/haproxy.py; drivers/kubernetes.py: manifests + API calls), the health and canary probes below
both (checks.py), the state of every deployment in SQLite (state.py). service.py is what the commands call
(deploy + gc, rollback, dry runs, status, teardown). `iodiff` decides whether a new version can replace the live
one in place (red-black) or needs its own route (versioned)."""
