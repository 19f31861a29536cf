"""Persistence: SQLAlchemy models, alembic migrations, the MetaSchedule database adapter."""
