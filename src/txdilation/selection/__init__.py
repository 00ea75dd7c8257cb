"""L3: the race for a path: one generation's hints dialled, listened for and punched, each
attempt's outcome, and the Connector that selects one link (then handed to ``path/``).
"""
