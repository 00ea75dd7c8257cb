"""L3: the race for a path: hints dialled, listened for and punched; one link selected."""
