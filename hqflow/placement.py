"""Placement, where users import it: :mod:`hqflow.engine.placement`."""
from .engine.placement import Placement  # noqa: F401
