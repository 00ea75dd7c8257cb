"""
Test support that needs more than loopback: Linux network namespaces and what runs in them.

Layer: test infrastructure (not shipped). Kept free of imports so that the helper programs in
this package (``python -m tests.support.probe``, ``python -m tests.support.linkdelay``) start
fast inside a namespace.

- ``tests.support.netns``: topologies (router, hosts, NATs, black holes, delay, address
  changes), processes inside namespaces, teardown, and the skip/fail policy.
- ``tests.support.servers``: the real mailbox server and transit relay as processes inside a
  namespace.
- ``tests.support.probe``: ping, TCP listen/connect and a connection flood, run inside a
  namespace by the tests and benchmarks.
- ``tests.support.linkdelay``: the userspace link delayer used where ``tc netem`` is missing.
"""
