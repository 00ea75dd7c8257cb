"""L2: one candidate TCP connection: relay line, prologue, frames, Noise, the KCM exchange."""
