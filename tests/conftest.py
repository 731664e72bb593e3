"""Shared fixtures: the three actors of every story (a lead, a researcher, an outsider) and a small organisation."""
