"""Shared test set-up: hypothesis profiles (no deadlines on a noisy 2-core machine; CI is derandomized)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config):
    """Factories hash a password for every user; the production hasher would make the stories crawl."""
    if config.pluginmanager.hasplugin("django"):
        from django.conf import settings as django_settings

        django_settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
