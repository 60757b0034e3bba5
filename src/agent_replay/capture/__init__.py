"""Capture: the ctx recording API and the OpenTelemetry span processor."""
