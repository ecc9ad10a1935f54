"""The run's record: store, names, values, task machine; applies reports (sans-I/O)."""
