"""``manage.py bench_policy``: time one scheduling cycle of each policy (wrapper over scheduling.simulation.cli)."""

import argparse

from django.core.management.base import BaseCommand, CommandError

from scheduling.simulation import cli


class Command(BaseCommand):
    help = "Time policy.plan() on synthetic snapshots of growing pending-queue size; print p50/p95 ms."

    def add_arguments(self, parser):
        cli.add_bench_arguments(parser)

    def handle(self, *args, **options):
        opts = argparse.Namespace(**options)
        code, message = cli.command_errors(lambda: cli.bench(opts, out=self.stdout, err=self.stderr))
        if code:
            raise CommandError(message, returncode=code)
