"""A Mesos-API-compatible local master and agents for tests and the single-machine mode.

A development and test stand-in, not a Mesos replacement (see README "Local Mesos-compatible cluster").
"""
