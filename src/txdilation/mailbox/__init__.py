"""L1: the DILATE-n mailbox messages, roles and generations (the Manager), the Dilator that
builds it, the status it reports, and how long to wait for a silent peer.
"""
