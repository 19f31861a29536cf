"""Initial schema: targets, models, workloads, tuning records, artifacts, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 20:06:41.959373
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("input_shapes", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("inputs", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("outputs", sa.JSON(none_as_null=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("sha256", name=op.f("uq_models_sha256")),
    )
    op.create_table(
        "targets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("spec", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("peak_gflops_per_core", sa.Float(), nullable=True),
        sa.Column("peak_gflops_all", sa.Float(), nullable=True),
        sa.Column("peak_threads", sa.Integer(), nullable=True),
        sa.Column("peak_measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_targets")),
        sa.UniqueConstraint("key", name=op.f("uq_targets_key")),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("manifest", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("verified", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("max_abs_err", sa.Float(), nullable=True),
        sa.Column("profile", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("bench", sa.JSON(none_as_null=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_artifacts_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_artifacts_target_id_targets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
    )
    op.create_index(op.f("ix_artifacts_model_id"), "artifacts", ["model_id"], unique=False)

    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("shash", sa.String(length=32), nullable=False),
        sa.Column("task_name", sa.Text(), nullable=False),
        sa.Column("mod_json", sa.Text(), nullable=False),
        sa.Column("flops", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_workloads_target_id_targets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
    )
    op.create_index(
        op.f("ix_workloads_target_id_shash"), "workloads", ["target_id", "shash"], unique=False
    )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("options", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("worker_id", sa.String(length=255), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("artifact_id", sa.Integer(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_jobs_artifact_id_artifacts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_jobs_model_id_models"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_jobs_target_id_targets"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_jobs_idempotency_key")),
    )
    op.create_index(op.f("ix_jobs_model_id"), "jobs", ["model_id"], unique=False)
    op.create_index(op.f("ix_jobs_status"), "jobs", ["status"], unique=False)

    op.create_table(
        "model_workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("op", sa.String(length=64), nullable=False),
        sa.Column("description", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("onnx_nodes", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("flops", sa.Float(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_model_workloads_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_model_workloads_workload_id_workloads"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_workloads")),
    )
    op.create_index(
        op.f("ix_model_workloads_model_id"), "model_workloads", ["model_id"], unique=False
    )
    op.create_index(
        op.f("ix_model_workloads_workload_id"), "model_workloads", ["workload_id"], unique=False
    )

    op.create_table(
        "tuning_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("trace", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("run_secs", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("mean_sec", sa.Float(), nullable=True),
        sa.Column("gflops", sa.Float(), nullable=True),
        sa.Column("target", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("args_info", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("trial_index", sa.Integer(), nullable=True),
        sa.Column("space", sa.String(length=64), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_tuning_records_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_records")),
    )
    op.create_index(op.f("ix_tuning_records_job_id"), "tuning_records", ["job_id"], unique=False)
    op.create_index(
        op.f("ix_tuning_records_workload_id_mean_sec"),
        "tuning_records",
        ["workload_id", "mean_sec"],
        unique=False,
    )

    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(none_as_null=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index(op.f("ix_job_events_job_id"), "job_events", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_job_events_job_id"), table_name="job_events")

    op.drop_table("job_events")
    op.drop_index(op.f("ix_tuning_records_workload_id_mean_sec"), table_name="tuning_records")
    op.drop_index(op.f("ix_tuning_records_job_id"), table_name="tuning_records")

    op.drop_table("tuning_records")
    op.drop_index(op.f("ix_model_workloads_workload_id"), table_name="model_workloads")
    op.drop_index(op.f("ix_model_workloads_model_id"), table_name="model_workloads")

    op.drop_table("model_workloads")
    op.drop_index(op.f("ix_jobs_status"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_model_id"), table_name="jobs")

    op.drop_table("jobs")
    op.drop_index(op.f("ix_workloads_target_id_shash"), table_name="workloads")

    op.drop_table("workloads")
    op.drop_index(op.f("ix_artifacts_model_id"), table_name="artifacts")

    op.drop_table("artifacts")
    op.drop_table("targets")
    op.drop_table("models")
