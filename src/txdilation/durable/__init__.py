"""L4: sequence numbers, the durable queue of unacknowledged records and its replay,
cumulative ACKs, duplicate suppression, read pausing and flow control.
"""
