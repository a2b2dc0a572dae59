"""A Mesos-API-compatible local master and agents for tests and the single-machine mode (not a Mesos replacement)."""
