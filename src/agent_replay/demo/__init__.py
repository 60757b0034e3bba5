"""The demo: a small support agent whose failure is planted at a known step."""
