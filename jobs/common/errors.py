"""The base of every error feedpipe explains in one line.

Bad input, settings or state (a landing file that cannot be read, a day that is not published,
a gate that refuses a day) raise a subclass of :class:`FeedpipeError`; the command line
prints it as ``feedpipe: error: <one line>`` and exits 1. Any other exception is a defect and
keeps its traceback. Each subclass also keeps the built-in base it had (``ValueError``,
``RuntimeError``), so code that catches those still does.
"""

from __future__ import annotations


class FeedpipeError(Exception):
    """A failure the user can act on, said in one line."""
