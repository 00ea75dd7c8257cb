"""L2: one candidate TCP connection: relay line, prologue, frames, the Noise session, the
KCM exchange; the protocol pumping them from ``dataReceived``.
"""
