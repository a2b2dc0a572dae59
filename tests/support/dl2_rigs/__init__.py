"""Test rigs shared by the tests and the benchmarks; not part of the installed package.

Fault rigs and scenarios (:mod:`.faults`, :mod:`.fault_scenarios`), bad input and load against the
API (:mod:`.faultload`), the fault benchmark (:mod:`.faultbench`), light executors for load runs
(:mod:`.lightexec`; paced by the speed table for the parity test, :mod:`.paced`) and a recording TCP proxy (:mod:`.recording_proxy`).

``tests/support`` is on ``sys.path`` through pytest's ``pythonpath`` setting (pyproject.toml);
``bench/faults.py`` adds it itself. The services they start (ZooKeeper, HDFS, the local cluster)
come from :mod:`dl2_mesos.services`.
"""
