"""The engine: the reporter thread's driver and the rules it applies to destinations."""
