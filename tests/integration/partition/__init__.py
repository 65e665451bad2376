"""Tests that partition servers from the test process (network namespaces; root only)."""
