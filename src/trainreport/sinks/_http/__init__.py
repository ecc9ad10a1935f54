"""HttpSink and its parts: opening, planning, sending, one kept-alive transport."""
