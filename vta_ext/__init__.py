"""An extended VTA accelerator: hardware config, ISA, compiler, functional and timing simulators."""
