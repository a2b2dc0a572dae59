"""DL2 Mesos framework: offers, per-slot policy decisions, job API, leader election (installed as dl2_mesos.framework)."""
