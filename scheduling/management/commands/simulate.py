"""``manage.py simulate``: a thin wrapper over scheduling.simulation.cli (same arguments, same output)."""

import argparse

from django.core.management.base import BaseCommand, CommandError

from scheduling.simulation import cli


class Command(BaseCommand):
    help = "Replay a job trace on a simulated cluster under one or all policies and print the pyramid."

    def add_arguments(self, parser):
        cli.add_simulate_arguments(parser)

    def handle(self, *args, **options):
        opts = argparse.Namespace(**options)
        code, message = cli.command_errors(lambda: cli.simulate(opts, out=self.stdout, err=self.stderr))
        if code:
            raise CommandError(message, returncode=code)
