"""Metronome's time format: ISO 8601 in UTC with milliseconds and a +0000 offset."""
import time
from typing import Optional


def iso(seconds: Optional[float]) -> Optional[str]:
    if seconds is None:
        return None
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000)) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}+0000"
