"""Peak spread and memory bandwidth on targets.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 04:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("peak_spread", sa.Float(), nullable=True))
        batch.add_column(sa.Column("bandwidth_gbs", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("bandwidth_gbs")
        batch.drop_column("peak_spread")
