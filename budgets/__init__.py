"""Budgets: the team tree, memberships, budget periods and grants, the GPU-hour ledger and time-slice contracts."""
