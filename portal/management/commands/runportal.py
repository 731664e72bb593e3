"""`manage.py runportal`: the embedded default in one process tree: the web server (and, once it exists, the loop).

Static files are served by WhiteNoise from the app folders, so nothing needs collecting first.
"""

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the portal on HOST:PORT with the embedded default (SQLite, no external service)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options) -> None:
        self.stdout.write(f"Portal on http://{host}:{port}/  (admin: http://{host}:{port}/admin/)")
        call_command("runserver", f"{host}:{port}", use_reloader=False)
