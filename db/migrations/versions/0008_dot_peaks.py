"""The dot-product peaks (vpdpbusd, vdpbf16ps) on targets: the roofs of int8 and bf16 convs.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 02:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("dot_peaks", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("dot_peaks")
