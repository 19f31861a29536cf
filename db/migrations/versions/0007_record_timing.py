"""Tuning records say how they were timed: rows stored before this were timed warm.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 05:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.add_column(
            sa.Column("timing", sa.String(length=32), server_default="warm", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_column("timing")
