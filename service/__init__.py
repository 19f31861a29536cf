"""The user-facing surface: CLI, FastAPI app, dashboard."""
