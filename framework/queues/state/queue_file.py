"""The operator's queue file (`--queues PATH`): one JSON object, each queue's name to the
body `PUT /v1/queues/{name}` takes, checked by the same rules:

    {"team-a": {"guarantee": {"gpus": 8}, "limit": {"gpus": 16}, "weight": 2},
     "team-b": {"guarantee": {"gpus": 4}}}

A file with one bad queue is refused whole (naming the file, the queue and the field),
so a typo never half-applies.
"""
import json
from pathlib import Path
from typing import Dict, Tuple, Union

from common import json_depth
from common.errors import UserError
from framework.queues.state.errors import QueueError
from framework.queues.state.queue import Queue, queue_from_json

MAX_FILE_BYTES = 1 << 20


def parse_queues(text: Union[str, bytes]) -> Tuple[Queue, ...]:
    """The queues of a file's text, in the file's order; QueueError naming `name.field`."""
    try:
        doc = json_depth.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise QueueError("", f"is not JSON: {e}", 400) from None
    if not isinstance(doc, dict):
        raise QueueError("", 'must be a JSON object of queues by name, such as '
                         '{"team-a": {"guarantee": {"gpus": 8}}}', 400)
    queues = []
    for name, body in doc.items():
        try:
            queues.append(queue_from_json(name, body))
        except QueueError as e:
            raise e.under(name) from None
    return tuple(queues)


def load_queue_file(path: Union[str, Path]) -> Tuple[Queue, ...]:
    """The queues of the operator's file, or a UserError naming the file and the field."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise UserError(f"queue file {path}: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"queue file {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return parse_queues(data)
    except QueueError as e:
        raise UserError(f"queue file {path}: {e}") from None


def queues_to_json(queues: Tuple[Queue, ...]) -> Dict[str, dict]:
    """The file's shape for `queues` (what `parse_queues` reads back)."""
    out = {}
    for queue in queues:
        body = queue.to_json()
        del body["name"]
        out[queue.name] = body
    return out


def dump_queues(queues: Tuple[Queue, ...]) -> str:
    return json.dumps(queues_to_json(queues), indent=2, sort_keys=True) + "\n"
