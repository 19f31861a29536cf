"""One module per resource: models, jobs, artifacts, health."""
