"""Helpers that start real services (ZooKeeper, HDFS, local cluster) for tests, benchmarks and the demo."""
