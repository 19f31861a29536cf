"""Cost models: one persisted XGBoost cost model per target.

Revision ID: 0003
Revises: 0005
Create Date: 2026-11-30 04:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cost_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("convtune_version", sa.String(length=64), nullable=False),
        sa.Column("record_count", sa.Integer(), nullable=False),
        sa.Column("workload_count", sa.Integer(), nullable=False),
        sa.Column("last_record_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_cost_models_target_id_targets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_models")),
        sa.UniqueConstraint("target_id", name=op.f("uq_cost_models_target_id")),
    )


def downgrade() -> None:
    op.drop_table("cost_models")
