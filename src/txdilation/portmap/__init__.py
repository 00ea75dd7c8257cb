"""Beside L2: a TCP port forward at the home router (PCP, NAT-PMP, UPnP IGD)."""
