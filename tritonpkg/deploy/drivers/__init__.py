"""Target drivers: the effects a plan's steps need (start units, move traffic, stop units)."""
