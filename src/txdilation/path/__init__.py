"""L3: the selected path while it carries records: dispatch, liveness, the dead-path verdict."""
