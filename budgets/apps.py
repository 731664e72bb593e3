from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "budgets"
    default_auto_field = "django.db.models.BigAutoField"
