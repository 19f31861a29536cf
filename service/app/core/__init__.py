"""Settings, database wiring and error handling shared by every route."""
