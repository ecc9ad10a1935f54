"""The Reporter the training loop calls, and what runs on the training thread."""
