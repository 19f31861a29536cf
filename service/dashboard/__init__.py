"""The per-layer tuning dashboard: server-rendered pages over the service's database.

``install_dashboard(app)`` adds the pages, their static files and Plotly.js to a FastAPI app.
"""

from .routes import install_dashboard

__all__ = ["install_dashboard"]
