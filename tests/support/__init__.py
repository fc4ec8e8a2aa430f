"""What the tests share: the naive oracle, page rendering, servers and workloads they start."""
