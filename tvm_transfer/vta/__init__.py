"""Tuners of the extended VTA accelerator: ML2Tuner and copula-seeded knob search."""
