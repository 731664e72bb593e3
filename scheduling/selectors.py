"""Reads for clusters, nodes and jobs (HackSoft selectors). Row-level visibility lives here, never in views."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet, Sum

from budgets.models import Membership
from budgets.selectors import governed_teams
from scheduling.models import ACTIVE_STATES, Cluster, Health, Job, JobEvent, JobState, Node


def jobs_visible_to(user) -> QuerySet[Job]:
    """Jobs the user may see: their own, their teams' (member or lead), and the whole subtree of teams they lead.

    Superusers see every job; anonymous users none.
    """
    jobs = Job.objects.select_related("team", "user", "cluster", "contract", "gpu_type")
    if user is None or not user.is_authenticated or not user.is_active:
        return jobs.none()
    if user.is_superuser:
        return jobs.all()
    member_of = Membership.objects.filter(user=user).values("team_id")
    visible = Q(user=user) | Q(team_id__in=member_of) | Q(team__in=governed_teams(user))
    return jobs.filter(visible)


def queue_for(cluster: Cluster) -> QuerySet[Job]:
    """The cluster's pending jobs in arrival order (submit time, then id).

    The order the jobs actually start in is the policy's (fair-share between teams, the lead's rank within one).
    """
    return (Job.objects.filter(cluster=cluster, state=JobState.PENDING)
            .select_related("team", "user", "contract", "gpu_type")
            .order_by("submitted_at", "id"))


def running_on(cluster: Cluster) -> QuerySet[Job]:
    """Jobs holding GPUs of the cluster (starting, running or preempting), oldest start first."""
    return (Job.objects.filter(cluster=cluster, state__in=ACTIVE_STATES)
            .select_related("team", "user", "contract", "gpu_type")
            .order_by("started_at", "submitted_at", "id"))


def job_timeline(job: Job) -> QuerySet[JobEvent]:
    """The job's events, oldest first: its submission, then every state transition."""
    return JobEvent.objects.filter(job=job).select_related("actor").order_by("at", "id")


def cluster_capacity(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Per GPU type name: ``{"nodes": n, "gpus": total, "healthy_gpus": GPUs on healthy nodes}``."""
    rows = (Node.objects.filter(cluster=cluster).values("gpu_type__name")
            .annotate(node_count=Count("id"), total_gpus=Sum("gpus"),
                      healthy_gpus=Sum("gpus", filter=Q(health=Health.HEALTHY)))
            .order_by("gpu_type__name"))
    return {row["gpu_type__name"]: {"nodes": row["node_count"], "gpus": row["total_gpus"] or 0,
                                    "healthy_gpus": row["healthy_gpus"] or 0} for row in rows}
