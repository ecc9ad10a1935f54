"""The reference server's storage: one interface, SQLite and PostgreSQL behind it."""
