"""The run log: its format, its files (the journal's too), replay, and sync's plan."""
