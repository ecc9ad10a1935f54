"""The wire: what crosses a boundary, the job-status protocol and the Sink interface."""
