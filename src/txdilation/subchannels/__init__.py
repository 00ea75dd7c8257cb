"""L5: subchannels as Twisted transports, their endpoints and listening ports, and the
multiplexer that routes records between them and L4.
"""
