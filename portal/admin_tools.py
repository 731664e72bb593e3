"""Robustness shared by every ModelAdmin of the portal: bad query strings get a 400-style answer, never a 500.

- ``SafeChangeList``: a date-hierarchy year Django cannot turn into a range (``?starts_at__year=9999``, a year
  past ``datetime``'s limits) is treated like any other bad filter (the changelist shows "?e=1").
- ``SafeAdminMixin.get_changeform_initial_data``: an add-form prefill (``/add/?team=abc``, ``?starts_at=x``) that
  the field cannot read, or that names no existing row, is dropped instead of crashing the form's widgets.
"""

from __future__ import annotations

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import FieldDoesNotExist, ValidationError


class SafeChangeList(ChangeList):
    def get_filters(self, request):
        try:
            return super().get_filters(request)
        except (OverflowError, ValueError) as error:  # e.g. the year after 9999 for a date hierarchy
            raise IncorrectLookupParameters(error) from error


def _prefill(field, value):
    """The prefill ``value`` as ``field`` reads it; raises ValidationError when it cannot be used."""
    if field.many_to_many or field.one_to_many:
        return value  # Django's own handling (comma-separated keys); none of the portal's forms prefill these
    if field.is_relation:
        key = field.target_field.to_python(value)
        if not field.related_model._default_manager.filter(**{field.target_field.attname: key}).exists():
            raise ValidationError("no such row")
        return key
    return field.to_python(value)


class SafeAdminMixin:
    def get_changelist(self, request, **kwargs):
        return SafeChangeList

    def get_changeform_initial_data(self, request):
        initial = {}
        for name, value in super().get_changeform_initial_data(request).items():
            try:
                field = self.opts.get_field(name)
            except FieldDoesNotExist:
                initial[name] = value
                continue
            try:
                initial[name] = _prefill(field, value)
            except (ValidationError, ValueError, TypeError, OverflowError):
                pass  # an unusable prefill is ignored, as an unknown one would be
        return initial
