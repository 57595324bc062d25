"""The distribution policies, where users import them: :mod:`hqflow.engine.distribution`."""
from .engine.distribution import *  # noqa: F401,F403
from .engine.distribution import __all__  # noqa: F401
