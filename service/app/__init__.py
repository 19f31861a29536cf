"""The HTTP service: FastAPI app (``create_app``), routes, CRUD and the job queue helpers."""
