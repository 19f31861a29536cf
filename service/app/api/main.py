"""All ``/api`` routes in one router."""

from fastapi import APIRouter

from .routes import artifacts, jobs, models

api_router = APIRouter()
api_router.include_router(models.router)
api_router.include_router(jobs.router)
api_router.include_router(artifacts.router)
