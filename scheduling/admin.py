"""The operators' admin. State changes go through the services: job states and node health are read-only here,
and the admin actions (mark draining/down/healthy, cancel) call ``set_node_health`` and ``cancel_job``. A job's
submission (team, shape, payload) is read-only too: only its name changes here, and its rank through
``set_job_rank`` (a lead's rule, pending jobs only)."""

from __future__ import annotations

from django.contrib import admin, messages

from budgets.admin import ServiceAdminMixin, ServiceForm
from budgets.errors import DomainError
from portal.admin_tools import SafeAdminMixin
from scheduling import services
from scheduling.models import Cluster, DebugSession, GPUType, Health, Job, JobEvent, Node, NodeHealthChange


class ReadOnlyAdminMixin:
    """Audit rows: visible, never added, changed or deleted from the admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(GPUType)
class GPUTypeAdmin(SafeAdminMixin, admin.ModelAdmin):
    list_display = ("name", "price_factor", "memory_gb")
    search_fields = ("name",)


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ("name", "gpu_type", "gpus", "health", "debug_pool")
    readonly_fields = ("health",)


@admin.register(Cluster)
class ClusterAdmin(SafeAdminMixin, admin.ModelAdmin):
    list_display = ("name", "adapter", "active", "created_at")
    list_filter = ("adapter", "active")
    search_fields = ("name",)
    inlines = [NodeInline]


def _health_action(health: str):
    def action(modeladmin, request, queryset):
        changed = 0
        for node in queryset:
            try:
                before = node.health
                services.set_node_health(actor=request.user, node=node, health=health,
                                         reason=f"marked {health} in the admin by {request.user}")
                changed += before != health
            except DomainError as error:
                modeladmin.message_user(request, f"{node}: {error}", messages.ERROR)
        modeladmin.message_user(request, f"{changed} node(s) marked {health}.", messages.SUCCESS)

    action.__name__ = f"mark_{health}"
    return admin.action(description=f"Mark selected nodes {health}")(action)


@admin.register(Node)
class NodeAdmin(SafeAdminMixin, admin.ModelAdmin):
    list_display = ("name", "cluster", "gpu_type", "gpus", "health", "debug_pool")
    list_filter = ("health", "cluster", "gpu_type", "debug_pool")
    search_fields = ("name", "cluster__name")
    readonly_fields = ("health",)
    actions = [_health_action(Health.DRAINING), _health_action(Health.DOWN), _health_action(Health.HEALTHY)]


@admin.register(NodeHealthChange)
class NodeHealthChangeAdmin(SafeAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("at", "node", "old_health", "new_health", "actor", "reason")
    list_filter = ("new_health", "node__cluster")
    search_fields = ("node__name", "reason")


class JobEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = JobEvent
    extra = 0
    fields = ("at", "from_state", "to_state", "reason", "actor")
    readonly_fields = fields
    ordering = ("at", "id")


@admin.action(description="Cancel selected jobs")
def cancel_jobs(modeladmin, request, queryset):
    cancelled = 0
    for job in queryset:
        try:
            services.cancel_job(actor=request.user, job=job, reason=f"cancelled in the admin by {request.user}")
            cancelled += 1
        except DomainError as error:
            modeladmin.message_user(request, f"{job}: {error}", messages.ERROR)
    modeladmin.message_user(request, f"{cancelled} job(s) cancelled.", messages.SUCCESS)


class JobForm(ServiceForm):
    class Meta:
        model = Job
        fields = ["name", "rank"]

    def call_service(self, actor):
        if "rank" in self.changed_data:  # on a fresh copy: the service reloads the job it is given
            services.set_job_rank(actor=actor, job=Job.objects.get(pk=self.instance.pk),
                                  rank=self.cleaned_data["rank"])
        return None


@admin.register(Job)
class JobAdmin(ServiceAdminMixin, admin.ModelAdmin):
    list_display = ("id", "name", "team", "user", "cluster", "gpus", "gpu_type", "contract", "state", "rank",
                    "submitted_at")
    list_filter = ("state", "cluster", "team", "contract", "scavenger")
    search_fields = ("name", "team__path", "user__username", "backend_id")
    list_select_related = ("team", "user", "cluster", "gpu_type", "contract")
    form = JobForm
    readonly_fields = ("team", "user", "cluster", "contract", "gpu_type", "gpus", "replicas", "image", "command",
                       "environment", "constraints",
                       "state", "runs", "scavenger", "placement", "backend_id", "waiting_reason", "exit_code",
                       "submitted_at", "started_at", "first_started_at", "preempt_deadline", "ended_at")
    inlines = [JobEventInline]
    actions = [cancel_jobs]

    def save_model(self, request, obj, form, change):
        obj.save(update_fields=["name"])  # the rank was set by set_job_rank; never rewrite the scheduler's columns

    def has_add_permission(self, request):
        return False  # jobs are submitted through submit_job (web or API), which validates and records them


@admin.register(DebugSession)
class DebugSessionAdmin(SafeAdminMixin, admin.ModelAdmin):
    list_display = ("job", "starts_at", "ends_at", "released_at", "release_reason")
    list_filter = ("job__cluster",)
    list_select_related = ("job",)
    readonly_fields = ("job",)  # a session belongs to the job reserved with it

    def has_add_permission(self, request):
        return False  # reserved through reserve_debug_session, which checks the limits and creates the job
