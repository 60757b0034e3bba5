"""One module per trace dialect; each registers itself with :func:`register_dialect`."""
