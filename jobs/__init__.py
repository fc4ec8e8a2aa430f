"""feedpipe: decide push vs pull per follow edge every day and materialize the feeds."""

__version__ = "0.1.0"
