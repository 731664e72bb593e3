"""Celery uses the broker CELERY_BROKER_URL names; with Redis, a real worker process runs our tasks."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from portal.celery import app
from portal.tasks import ping

ROOT = Path(__file__).resolve().parents[2]
BROKER = os.environ.get("CELERY_BROKER_URL", "")


def test_celery_reads_the_broker_from_the_environment():
    expected = BROKER or "memory://"
    assert app.conf.broker_url == expected == settings.CELERY_BROKER_URL


@pytest.mark.skipif(not BROKER.startswith("redis://"), reason="needs CELERY_BROKER_URL=redis://...")
def test_a_real_worker_runs_a_task_through_redis(tmp_path):
    env = {**os.environ, "CELERY_RESULT_BACKEND": BROKER, "CELERY_TASK_ALWAYS_EAGER": "false",
           "PORTAL_VAR_DIR": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--concurrency=1",
         "--loglevel=WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
         "-n", f"test-{os.getpid()}@%h", "-Q", f"test-{os.getpid()}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        app.conf.result_backend = BROKER
        app.conf.task_always_eager = False
        result = ping.apply_async(args=["hello from the test"], queue=f"test-{os.getpid()}")
        deadline = time.monotonic() + 60
        while not result.ready() and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.2)
        assert worker.poll() is None, worker.stdout.read()
        assert result.get(timeout=5) == "hello from the test"
    finally:
        app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER
        app.conf.result_backend = settings.CELERY_RESULT_BACKEND or None
        worker.terminate()
        worker.wait(timeout=20)
