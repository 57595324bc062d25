"""The trace export, where users import it: :mod:`hqflow.trace.export`."""
from .trace.export import draw_gantt, to_chrome_trace, write_chrome_trace  # noqa: F401
