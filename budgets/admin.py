"""The Django admin of the budgets app, for operators.

Writes that have rules go through the services, so the admin cannot bypass them: a new team goes through
``create_team``, a new period through ``create_period``, a membership through ``add_membership`` (and only a lead of
the team may change or remove one), and every grant through ``grant_budget`` (checked against the tree rule and
audited). A service's error is shown on the form and nothing is written. Budget changes and
ledger entries are read-only here: entries are added only by services.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db import router, transaction

from budgets import selectors, services
from budgets.errors import DomainError, PermissionDenied
from budgets.models import Budget, BudgetChange, BudgetPeriod, Contract, LedgerEntry, Membership, Team
from portal.admin_tools import SafeAdminMixin


class ServiceForm(forms.ModelForm):
    """A model form whose save is performed by a service, called after the form's own validation.

    ``call_service(actor)`` returns the saved object or raises a DomainError, which becomes a form error (on the
    field it names when the form has it). A service writes nothing when it raises; when it succeeds but the page
    is refused afterwards (an inline, a missing management form), ``ServiceAdminMixin`` rolls its writes back.
    """

    actor = None  # set by the admin's get_form
    saved = None

    def call_service(self, actor):  # pragma: no cover - abstract
        raise NotImplementedError

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:
            self.saved = self.call_service(self.actor)
        except DomainError as error:
            field = error.field if error.field in self.fields else None
            self.add_error(field, error.message if field else str(error))


class ServiceAdminMixin(SafeAdminMixin):
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A POST either saves everything (``save_related`` ran) or writes nothing, even when the form's service
        succeeded and an inline (or its management form) was refused afterwards."""
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        with transaction.atomic(using=router.db_for_write(self.model)):
            request._service_admin_saved = False
            response = super().changeform_view(request, object_id, form_url, extra_context)
            if not request._service_admin_saved:
                transaction.set_rollback(True)
        return response

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"actor": request.user})

    def save_model(self, request, obj, form, change):
        saved = getattr(form, "saved", None)
        if saved is None:  # a plain field change the service does not cover
            super().save_model(request, obj, form, change)
            return
        obj.pk = saved.pk
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})
        obj._state.adding = False

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        request._service_admin_saved = True  # the admin saves related objects only once everything was valid


# --- teams --------------------------------------------------------------------------------------------------------

class TeamForm(ServiceForm):
    class Meta:
        model = Team
        fields = ["name", "slug", "parent", "description"]

    def call_service(self, actor):
        if self.instance.pk:  # name and description only; slug and parent are read-only once created
            return None
        data = self.cleaned_data
        return services.create_team(actor=actor, name=data["name"], slug=data["slug"], parent=data.get("parent"),
                                    description=data.get("description", ""))


def _leads(request, team) -> bool:
    """May the admin's user change the members of ``team``? ``services.add_membership``'s rule."""
    return selectors.is_lead_of(request.user, team)


class MembershipInline(admin.TabularInline):
    """A team's members, on its page. Only a lead of the team (or of an ancestor), or a superuser, may change them
    (``services.add_membership``'s rule): for anyone else the list is read-only."""

    model = Membership
    extra = 0
    autocomplete_fields = ["user"]

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and obj is not None and _leads(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and obj is not None and _leads(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and obj is not None and _leads(request, obj)


@admin.register(Team)
class TeamAdmin(ServiceAdminMixin, admin.ModelAdmin):
    form = TeamForm
    list_display = ["path", "name", "parent", "created_at"]
    list_select_related = ["parent"]
    search_fields = ["path", "name", "slug"]
    ordering = ["path"]
    inlines = [MembershipInline]

    def get_inlines(self, request, obj):
        # Members are added once the team exists: the add form only creates the team (through create_team).
        return self.inlines if obj is not None else []

    def get_readonly_fields(self, request, obj=None):
        # The path of every descendant derives from slug and parent: they never change once created.
        return ["path", "slug", "parent"] if obj is not None else ["path"]


class MembershipForm(ServiceForm):
    class Meta:
        model = Membership
        fields = ["user", "team", "role"]

    def call_service(self, actor):
        data = self.cleaned_data
        # user and team are read-only once the membership exists: only its role changes
        return services.add_membership(actor=actor, team=data.get("team") or self.instance.team,
                                       user=data.get("user") or self.instance.user, role=data["role"])


@admin.register(Membership)
class MembershipAdmin(ServiceAdminMixin, admin.ModelAdmin):
    """Memberships go through ``add_membership``; changing or removing one needs the same right: leading the team
    (or an ancestor), or being a superuser."""

    form = MembershipForm
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role"]
    list_select_related = ["user", "team"]
    search_fields = ["user__username", "team__path"]
    autocomplete_fields = ["user", "team"]

    def get_readonly_fields(self, request, obj=None):
        return ["user", "team"] if obj is not None else []

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not request.user.is_superuser:
            actions.pop("delete_selected", None)  # a bulk delete checks no team: one at a time, each checked
        return actions

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and (obj is None or _leads(request, obj.team))

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or _leads(request, obj.team))


# --- periods and budgets ------------------------------------------------------------------------------------------

class BudgetPeriodForm(ServiceForm):
    class Meta:
        model = BudgetPeriod
        fields = ["name", "starts_at", "ends_at"]

    def call_service(self, actor):
        data = self.cleaned_data
        if self.instance.pk:
            # Editing an existing period: create_period's rules (operators only, no overlap).
            if not selectors.is_superuser(actor):
                raise PermissionDenied(f"{actor} may not change budget periods; only operators may")
            other = selectors.overlapping_periods(data["starts_at"], data["ends_at"]) \
                .exclude(pk=self.instance.pk).first()
            if other is not None:
                self.add_error("starts_at", f"the period would overlap {other.name}")
            return None
        return services.create_period(actor=actor, name=data["name"], starts_at=data["starts_at"],
                                      ends_at=data["ends_at"])


@admin.register(BudgetPeriod)
class BudgetPeriodAdmin(ServiceAdminMixin, admin.ModelAdmin):
    form = BudgetPeriodForm
    list_display = ["name", "starts_at", "ends_at"]
    search_fields = ["name"]
    date_hierarchy = "starts_at"


class BudgetForm(ServiceForm):
    reason = forms.CharField(max_length=500, required=False, help_text="recorded in the audit trail")

    class Meta:
        model = Budget
        fields = ["team", "period", "gpu_hours"]

    def call_service(self, actor):
        data = self.cleaned_data
        team = data.get("team") or self.instance.team
        period = data.get("period") or self.instance.period
        return services.grant_budget(actor=actor, team=team, period=period, gpu_hours=data["gpu_hours"],
                                     reason=data.get("reason", ""))


class BudgetChangeInline(admin.TabularInline):
    model = BudgetChange
    extra = 0
    can_delete = False
    fields = readonly_fields = ["at", "actor", "old_gpu_hours", "new_gpu_hours", "reason"]
    ordering = ["-at", "-id"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Budget)
class BudgetAdmin(ServiceAdminMixin, admin.ModelAdmin):
    """Every grant saved here goes through ``grant_budget``: checked against the tree rule and audited."""

    form = BudgetForm
    list_display = ["team", "period", "gpu_hours", "balance_display", "updated_at"]
    list_filter = ["period"]
    list_select_related = ["team", "period"]
    search_fields = ["team__path"]
    autocomplete_fields = ["team"]
    inlines = [BudgetChangeInline]

    def get_queryset(self, request):
        return selectors.with_balance(super().get_queryset(request))

    def get_readonly_fields(self, request, obj=None):
        return ["team", "period"] if obj is not None else []

    @admin.display(description="balance", ordering="balance")
    def balance_display(self, obj):
        value = getattr(obj, "balance", None)
        return services.fmt(value if value is not None else selectors.balance(obj))

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(SafeAdminMixin, admin.ModelAdmin):
    """Audit rows: visible, never added, changed or deleted by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BudgetChange)
class BudgetChangeAdmin(ReadOnlyAdmin):
    list_display = ["at", "budget", "actor", "old_gpu_hours", "new_gpu_hours", "reason"]
    list_select_related = ["budget__team", "budget__period", "actor"]
    list_filter = ["budget__period"]
    search_fields = ["budget__team__path", "reason", "actor__username"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "budget", "kind", "gpu_hours", "job_ref", "interval_start", "actor", "reason"]
    list_select_related = ["budget__team", "budget__period", "actor"]
    list_filter = ["kind", "budget__period"]
    search_fields = ["job_ref", "budget__team__path", "reason"]
    date_hierarchy = "created_at"


@admin.register(Contract)
class ContractAdmin(SafeAdminMixin, admin.ModelAdmin):
    list_display = ["name", "queue", "protected_minutes", "grace_seconds", "max_runtime_minutes", "price_factor",
                    "requeue_on_preemption", "active"]
    list_filter = ["queue", "active"]
    search_fields = ["name", "description"]
