"""``python -m convtune.service.app``: ``serve`` with settings from ``CONVTUNE_*``."""

from .main import serve

if __name__ == "__main__":
    serve()
