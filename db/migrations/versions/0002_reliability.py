"""Clients and live workers: ``owner`` of models and jobs (quotas, fair claim order) and the
``workers`` heartbeat table (health).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 04:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("models", "jobs"):
        op.add_column(
            table,
            sa.Column("owner", sa.String(length=64), server_default="anonymous", nullable=False),
        )
        op.create_index(op.f(f"ix_{table}_owner"), table, ["owner"], unique=False)
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("worker_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("worker_id", name=op.f("uq_workers_worker_id")),
    )
    op.create_index(op.f("ix_workers_heartbeat_at"), "workers", ["heartbeat_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_workers_heartbeat_at"), table_name="workers")
    op.drop_table("workers")
    for table in ("jobs", "models"):
        op.drop_index(op.f(f"ix_{table}_owner"), table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("owner")
