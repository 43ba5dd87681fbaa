"""Where cli.py still reads the lab's seed and K; they live in core/course.py (delete this once cli imports it)."""
from minitrain.core.course import LAB_K, LAB_SEED  # noqa: F401
