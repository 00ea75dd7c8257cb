"""Port mapping: ask the home router for a TCP port forward (PCP, NAT-PMP, UPnP IGD)."""
