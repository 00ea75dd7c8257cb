"""L5: subchannels as Twisted transports, their endpoints, the Multiplexer routing records."""
