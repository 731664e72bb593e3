"""`manage.py seed_demo`: an idempotent demo organisation, contracts and a simulated cluster.

Run it twice and nothing changes the second time: rows are looked up by their natural keys and only created when
missing, so grants a lead edited in the browser are never reset. The demo password is generated once, kept in
``var/demo-password.txt`` (never committed) and printed on every run.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone as djtz

from budgets.models import Budget, BudgetPeriod, Contract, Membership, Queue, Role, Team
from scheduling.models import Cluster, GPUType, Node

# (path, name, grant in GPU-hours for the quarter). Each parent keeps a small unsplit remainder.
TEAMS = [
    ("lab", "Research lab", 250_000),
    ("lab/vision", "Vision", 80_000),
    ("lab/vision/detection", "Detection", 35_000),
    ("lab/vision/generation", "Generation", 40_000),
    ("lab/language", "Language", 110_000),
    ("lab/language/pretrain", "Pretraining", 60_000),
    ("lab/language/alignment", "Alignment", 30_000),
    ("lab/language/evaluation", "Evaluation", 12_000),
    ("lab/systems", "Systems", 40_000),
    ("lab/systems/infra", "Infrastructure", 15_000),
    ("lab/systems/compilers", "Compilers", 20_000),
]
RESEARCHERS_PER_LEAF = 2

CONTRACTS = [
    # name, queue, protected min, grace s, max runtime min, price factor, requeue, description
    ("scavenger", Queue.BATCH, 0, 60, None, "0.5", True, "Cheap, always preemptible: runs on idle GPUs."),
    ("standard", Queue.BATCH, 120, 600, None, "1.0", True,
     "Protected for 2 h, then may be asked to checkpoint and yield with 10 min notice."),
    ("long", Queue.BATCH, 1440, 1800, 10080, "1.5", True,
     "Protected for 24 h, 30 min notice; costs 1.5x. At most 7 days."),
    ("debug", Queue.DEBUG, 240, 60, 240, "1.0", False, "Interactive debug session, up to 4 h, never preempted."),
]

GPU_TYPES = [("H100", "1.0", 80), ("B200", "2.0", 192), ("B300", "2.5", 288)]
NODES = [("h100", "H100", 8), ("b200", "B200", 4)]  # (prefix, type, count) of 8-GPU nodes


def current_quarter(now: datetime) -> tuple[str, datetime, datetime]:
    q = (now.month - 1) // 3
    start = datetime(now.year, 3 * q + 1, 1, tzinfo=timezone.utc)
    end = datetime(now.year + (q == 3), (3 * q + 3) % 12 + 1, 1, tzinfo=timezone.utc)
    return f"{now.year}-Q{q + 1}", start, end


class Command(BaseCommand):
    help = "Create (once) a demo organisation with leads and researchers, budgets, contracts and a cluster."

    def handle(self, *args, **options) -> None:
        password, new_password = self._password()
        with transaction.atomic():
            created = self._seed(password)
        self.stdout.write(self.style.SUCCESS(
            f"demo organisation ready ({created} rows created)" if created else "demo organisation already present"))
        users = get_user_model().objects.filter(username__in=self._usernames()).order_by("username")
        self.stdout.write("Demo accounts (log into http://127.0.0.1:8000/admin/ as 'operator'):")
        for user in users:
            roles = ", ".join(f"{m.role} of {m.team.path}" for m in user.memberships.select_related("team"))
            kind = "operator (superuser)" if user.is_superuser else roles
            self.stdout.write(f"  {user.username:<22} {kind}")
        note = "" if new_password else f" (kept in {self._password_file()})"
        self.stdout.write(f"Password for every demo account: {password}{note}")

    # -- pieces ---------------------------------------------------------------------------------------------------

    def _password_file(self) -> Path:
        return Path(settings.VAR_DIR) / "demo-password.txt"

    def _password(self) -> tuple[str, bool]:
        path = self._password_file()
        if path.exists():
            return path.read_text().strip(), False
        path.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(9)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password, True

    @staticmethod
    def _lead_name(path: str) -> str:
        return "director" if path == "lab" else f"{path.split('/')[-1]}-lead"

    def _usernames(self) -> list[str]:
        names = ["operator"] + [self._lead_name(p) for p, _, _ in TEAMS]
        leaves = [p for p, _, _ in TEAMS if not any(q.startswith(p + "/") for q, _, _ in TEAMS)]
        names += [f"{p.split('/')[-1]}-r{i}" for p in leaves for i in range(1, RESEARCHERS_PER_LEAF + 1)]
        return names

    def _user(self, username: str, password: str, **flags) -> tuple[object, bool]:
        user, created = get_user_model().objects.get_or_create(username=username, defaults=flags)
        if created:
            user.set_password(password)
            user.save()
        return user, created

    def _seed(self, password: str) -> int:
        created = 0
        _, c = self._user("operator", password, is_staff=True, is_superuser=True)
        created += c

        name, starts, ends = current_quarter(djtz.now())
        period, c = BudgetPeriod.objects.get_or_create(name=name, defaults={"starts_at": starts, "ends_at": ends})
        created += c

        teams: dict[str, Team] = {}
        for path, title, grant in TEAMS:
            parent_path, _, slug = path.rpartition("/")
            parent = teams.get(parent_path)
            team = Team.objects.filter(path=path).first()
            if team is None:
                team = Team.objects.create(name=title, slug=slug, parent=parent)
                created += 1
            teams[path] = team
            lead, c = self._user(self._lead_name(path), password)
            created += c
            _, c = Membership.objects.get_or_create(user=lead, team=team, defaults={"role": Role.LEAD})
            created += c
            _, c = Budget.objects.get_or_create(team=team, period=period, defaults={"gpu_hours": Decimal(grant)})
            created += c
            is_leaf = not any(q.startswith(path + "/") for q, _, _ in TEAMS)
            for i in range(1, RESEARCHERS_PER_LEAF + 1 if is_leaf else 1):
                researcher, c = self._user(f"{slug}-r{i}", password)
                created += c
                _, c = Membership.objects.get_or_create(user=researcher, team=team, defaults={"role": Role.MEMBER})
                created += c

        for cname, queue, protected, grace, max_rt, price, requeue, description in CONTRACTS:
            _, c = Contract.objects.get_or_create(name=cname, defaults=dict(
                queue=queue, protected_minutes=protected, grace_seconds=grace, max_runtime_minutes=max_rt,
                price_factor=Decimal(price), requeue_on_preemption=requeue, description=description))
            created += c

        types = {}
        for tname, price, memory in GPU_TYPES:
            types[tname], c = GPUType.objects.get_or_create(
                name=tname, defaults={"price_factor": Decimal(price), "memory_gb": memory})
            created += c

        cluster, c = Cluster.objects.get_or_create(name="demo", defaults={
            "adapter": "simulated", "adapter_settings": {"speedup": 60}})
        created += c
        for prefix, tname, count in NODES:
            for i in range(1, count + 1):
                _, c = Node.objects.get_or_create(cluster=cluster, name=f"{prefix}-{i:02d}", defaults={
                    "gpu_type": types[tname], "gpus": 8,
                    # The last H100 node serves debug sessions first.
                    "debug_pool": prefix == "h100" and i == count})
                created += c
        return created
