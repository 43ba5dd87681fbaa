"""Layer 4: judging a run: the stability tree and walker, comparison with a baseline, the lab signature."""
