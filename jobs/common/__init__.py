"""Shared plumbing: configuration, Spark session, storage layout and table I/O."""
