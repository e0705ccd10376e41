"""Rollouts: pure plans (plan.py) carried out by an executor (executor.py) through a target driver that
implements the Driver protocol (driver.py; drivers/local.py: tritonservers behind HAProxy;
drivers/kubernetes.py: manifests + API calls), with the state of every deployment in SQLite (state.py).
service.py is what the commands call (deploy + gc, rollback, dry runs, status, teardown). `iodiff` decides
whether a new version can replace the live one in place (red-black) or needs its own route (versioned)."""
