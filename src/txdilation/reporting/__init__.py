"""What a session and an endpoint tell a person and a log: advice, status events."""
