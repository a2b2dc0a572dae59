"""dl2-mesos: an elastic deep-learning cluster scheduler for Apache Mesos with a learned DL2 policy.

The core package holds the types shared by the simulator, the policies, the framework and the
executor. It imports only the standard library and numpy, so that job processes (which run
under an older numpy for MXNet) and every other component can use it.
"""

__version__ = "0.1.0"
