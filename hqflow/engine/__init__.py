"""The engine: the one loop (``scheduler.py``) with its window, checkpoints, elastic pools, executors (local
and Ray), replicas, placement and distributions."""
