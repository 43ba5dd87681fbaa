"""minitrain: a small, exact laboratory for training-stability work on a mini-GPT."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1  # run-folder layout (manifest, metrics rows, checkpoints)
