"""The training kit every engine uses: options and defaults (config), input guards, checkpoints,
the model zoo and parameter/gradient synchronisation (sync). No engine lives here."""
