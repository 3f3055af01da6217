"""A two-node Ray cluster on this machine, kept by its own process (``python tests/ray_cluster.py``), as Ray's
own tests make one (:class:`ray.cluster_utils.Cluster`): a head node with room for every worker of a test run
(so a worker lost with the other node has somewhere to restart) and a second node.

It prints one JSON line, ``{"address": ...}``, once both nodes are up, then answers lines on its stdin:
``remove`` kills the second node's processes at once (a machine lost, not a node drained) and ``add`` starts
a second node again; each answers one line when done. End of input shuts the cluster down.

Its own process, and its own Ray temporary directory (``RAY_TMPDIR``): ``Cluster`` records its address where
a plain ``ray.init()`` looks for one, which would send other tests' local Ray instances to this cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

#: Ray's own tests shorten the health checks so that a lost node is noticed in seconds rather than a minute.
HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                 "health_check_failure_threshold": 3}
HEAD_CPUS, SECOND_CPUS = 4, 2


def main() -> None:
    temporary = tempfile.mkdtemp(prefix="rlplug-ray-")  # short: Ray's socket paths must fit in 107 characters
    os.environ["RAY_TMPDIR"] = temporary
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": HEAD_CPUS, "include_dashboard": False,
                                                            "_system_config": HEALTH_CHECKS})
    second = cluster.add_node(num_cpus=SECOND_CPUS)
    cluster.wait_for_nodes()
    print(json.dumps({"address": cluster.address}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "remove" and second is not None:
                cluster.remove_node(second, allow_graceful=False)
                second = None
            elif line.strip() == "add" and second is None:
                second = cluster.add_node(num_cpus=SECOND_CPUS)
                cluster.wait_for_nodes()
            print(json.dumps({"done": line.strip()}), flush=True)
    finally:
        cluster.shutdown()
        shutil.rmtree(temporary, ignore_errors=True)


if __name__ == "__main__":
    main()
