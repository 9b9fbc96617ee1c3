"""Named clusters: one module (``CLUSTER`` and its presets) and one site file (``<name>.sh``) each."""
