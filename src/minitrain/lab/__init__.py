"""Layer 6: the lab and the learner's workflow on top of runs, analysis and pages."""
