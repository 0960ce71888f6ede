"""Loader adapters speaking the conformance protocol (see docs: conformance/adapter protocol)."""
