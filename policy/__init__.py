"""Policies, simulator and training (installed as dl2_mesos.policy)."""
