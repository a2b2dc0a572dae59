"""Launchers for the local services the demo, the tests and the benchmarks start on one machine.

* :mod:`~dl2_mesos.services.localcluster`: ``LocalCluster``, the Mesos-compatible local master and
  agents (:mod:`dl2_mesos.localmesos`) in this process or as a ``dl2 local-cluster`` subprocess.
* :mod:`~dl2_mesos.services.zookeeper`: a real standalone ZooKeeper (Debian's ``zookeeper``).
* :mod:`~dl2_mesos.services.hdfs`: a real single-node HDFS (Hadoop 2.7.3 jars, ``DL2_HADOOP_JARS``).

They are part of the package because ``dl2 demo`` runs on them; production uses a real Mesos,
ZooKeeper and HDFS (``deploy/``).
"""
