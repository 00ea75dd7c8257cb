"""L4: what makes the link durable: seqnums, unacknowledged queue, replay, ACKs, flow control."""
