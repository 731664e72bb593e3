"""Settings, read from the environment (12-factor).

The embedded default needs nothing installed: SQLite in ``var/portal.sqlite3`` and Celery tasks run in-process.
Production sets ``DATABASE_URL`` (PostgreSQL through psycopg 3) and ``CELERY_BROKER_URL`` (Redis).
"""

from pathlib import Path

import dj_database_url

from portal.env import envbool, envfloat, envint, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", True)
SECRET_KEY = envstr("SECRET_KEY", "insecure-dev-key-set-SECRET_KEY-in-production")
ALLOWED_HOSTS = [h for h in envstr("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in envstr("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "budgets",
    "scheduling",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}"),
        conn_max_age=envint("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # Several processes (web, worker, beat) share the file: wait for locks instead of failing at once.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/admin/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
# Serve straight from the app folders when nothing was collected (the embedded default needs no collectstatic).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- REST API --------------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU budget portal API",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI served from the installed sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ----------------------------------------------------------------------------------------------------
# Embedded default: no broker server; tasks run in the calling process. Set CELERY_BROKER_URL=redis://... for real.
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "memory://")
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", "")
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", CELERY_BROKER_URL.startswith("memory://"))
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"

# --- The portal's own settings ----------------------------------------------------------------------------------
PORTAL = {
    # Share of a period's unused GPU-hours carried into the next period's copy (0 = all expire).
    "CARRY_OVER_SHARE": envfloat("PORTAL_CARRY_OVER_SHARE", 0.0),
    # Debug sessions: the largest and longest a researcher may reserve.
    "DEBUG_MAX_GPUS": envint("PORTAL_DEBUG_MAX_GPUS", 8),
    "DEBUG_MAX_MINUTES": envint("PORTAL_DEBUG_MAX_MINUTES", 240),
    # Open sessions one person may hold at once (overlapping windows; 0 = no limit): keeps the queue interactive.
    "DEBUG_MAX_SESSIONS_PER_USER": envint("PORTAL_DEBUG_MAX_SESSIONS_PER_USER", 2),
    # ... and one team (0 = no limit): a burst spread over a team's people cannot fill the debug pool either.
    "DEBUG_MAX_SESSIONS_PER_TEAM": envint("PORTAL_DEBUG_MAX_SESSIONS_PER_TEAM", 0),
    # Fair-share memory: half-life of decayed usage.
    "USAGE_HALF_LIFE_HOURS": envfloat("PORTAL_USAGE_HALF_LIFE_HOURS", 168.0),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
