"""Alembic migration environment for the convtune schema, shipped inside the package."""
