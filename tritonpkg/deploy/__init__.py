"""Rollouts: pure plans (plan.py) carried out by an executor (executor.py) through a target driver
(drivers/local.py: tritonservers behind HAProxy; drivers/kubernetes.py: manifests + API calls), with
the state of every deployment in SQLite (state.py). `iodiff` decides whether a new version can
replace the live one in place (red-black) or needs its own route (versioned)."""
