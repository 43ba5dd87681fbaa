"""Layer 5: pages (the per-run dashboard, the index). They draw what analysis/ judges."""
