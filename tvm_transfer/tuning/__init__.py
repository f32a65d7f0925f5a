"""Tuning sessions: operators, networks, compiling, task selection, schedule transfer, collection."""
