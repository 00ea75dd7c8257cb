"""L1: the wormhole side: DILATE-n messages, the Manager, the Dilator, the status it reports."""
