"""What the offline algorithms (``bc``, ``iql``, ``cql``, ``td3-bc``) share: learning from a dataset through the
off-policy family's update (:mod:`rlplug.plugins.algorithms.offline.base`). Registers nothing."""
