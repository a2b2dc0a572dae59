"""DL2 custom Mesos executor (installed as dl2_mesos.executor)."""
