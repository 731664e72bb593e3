"""Portal-level Celery tasks. ``ping`` proves a worker is alive and reading the configured broker."""

from celery import shared_task


@shared_task(name="portal.ping")
def ping(payload: str = "pong") -> str:
    return payload
