"""Tuners of the extended VTA accelerator: ML2Tuner, copula-seeded knob search and a random/grid sweep."""
