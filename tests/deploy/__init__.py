"""Deployment tests: the wheel shipped to a standalone cluster and submitted with spark-submit."""
