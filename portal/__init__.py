"""The Django project: settings, URLs, the Celery app, authentication and the dashboard."""

from .celery import app as celery_app

__all__ = ("celery_app",)
