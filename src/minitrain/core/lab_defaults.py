"""The lab's seed and injection step, as the lab text prints them (`seed=42 ... injection_step=500`).

Defined once, in a module that imports nothing, so that `minitrain --help` can name them without loading the
config machinery."""
LAB_SEED, LAB_K = 42, 500
