"""Fleets of RPC measuring devices; which device measured each trial.

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-30 04:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("tracker_host", sa.String(length=255), nullable=False),
        sa.Column("tracker_port", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("peak_gflops_per_core", sa.Float(), nullable=True),
        sa.Column("peak_gflops_all", sa.Float(), nullable=True),
        sa.Column("peak_threads", sa.Integer(), nullable=True),
        sa.Column("peak_device", sa.String(length=255), nullable=True),
        sa.Column("peak_measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleets")),
        sa.UniqueConstraint("name", name=op.f("uq_fleets_name")),
    )
    with op.batch_alter_table("tuning_records") as batch:
        batch.add_column(sa.Column("device", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_column("device")
    op.drop_table("fleets")
