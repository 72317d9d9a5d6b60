"""The v1 API's value forms the drivers need: bytes fields (base64 in JSON: a status
update's uuid, a message's data) and Mesos' duration strings ("15mins", "2secs")."""
import base64

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "secs": 1.0, "mins": 60.0, "hrs": 3600.0,
          "days": 86400.0, "weeks": 604800.0}


def encode_data(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_data(text: str) -> bytes:
    return base64.b64decode(text)


def parse_duration(text: str) -> float:
    """Seconds of a Mesos duration; ValueError naming the units otherwise."""
    text = text.strip()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]) * _UNITS[unit]
            except ValueError:
                break
    raise ValueError(f"{text!r} is not a Mesos duration (a number and one of "
                     f"{', '.join(_UNITS)})")
