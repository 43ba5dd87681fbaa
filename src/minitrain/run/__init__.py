"""Layer 2: the run folder on disk: atomic writes and checkpoints (files), the one reader (reader), blind redaction."""
