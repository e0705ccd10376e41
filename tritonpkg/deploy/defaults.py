"""The deploy defaults the library and the command line share (the CLI imports this at start: nothing else here)."""

ADAPTER_GRACE_S = 30.0  # old adapters stay served this long after their names moved (requests on them finish)
DWELL_S = 5.0  # seconds of traffic at each traffic step before its gate
GC_GRACE_S = 3600.0  # versioned: superseded versions idle this long are retired
