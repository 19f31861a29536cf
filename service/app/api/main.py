"""All ``/api`` routes in one router."""

from fastapi import APIRouter

from .routes import artifacts, fleets, jobs, models

api_router = APIRouter()
api_router.include_router(models.router)
api_router.include_router(jobs.router)
api_router.include_router(artifacts.router)
api_router.include_router(fleets.router)
