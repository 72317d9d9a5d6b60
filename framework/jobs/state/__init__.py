"""The jobs model: frozen dataclasses read from and written to Metronome's JSON."""
