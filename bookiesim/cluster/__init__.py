"""Starting, watching and stopping bookies.

``processes``: ``bookiesim bookie`` child processes (spawn, ready line, stop, ``pid_alive``);
``control``: a local cluster of them recorded in ``cluster.json`` (``bookiesim cluster``);
``prometheus``: a Prometheus server scraping it; ``in_process``: a cluster in one trio run
(``running_cluster``, fault injection) and ``testing``: one bookie in-process with a test
client, both for tests and experiments.
"""
