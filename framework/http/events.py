"""The event bus behind `GET /v2/events` (server-sent events).

Each subscriber gets its own bounded queue; a subscriber too slow to keep up
loses its stream (it is told so and disconnected) instead of holding memory or
slowing the publisher. Event bodies are Marathon's: `eventType`, `timestamp`
and the event's fields.
"""
import json
import queue
import threading
from typing import Iterable, List, Optional

from framework.tasks.timestamps import format_timestamp

QUEUE_LIMIT = 1000
OVERFLOW = object()


class Subscription:
    def __init__(self, types: Optional[Iterable[str]]) -> None:
        self.types = frozenset(types) if types else None
        self.queue: "queue.Queue" = queue.Queue(QUEUE_LIMIT)
        self.overflowed = False

    def wants(self, event_type: str) -> bool:
        return self.types is None or event_type in self.types

    def next(self, timeout: float):
        """The next frame (`event: ...\\ndata: ...\\n\\n` bytes), None on timeout,
        OVERFLOW when this subscriber fell behind."""
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None


class EventBus:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: List[Subscription] = []

    def subscribe(self, types: Optional[Iterable[str]] = None) -> Subscription:
        subscription = Subscription(types)
        with self._lock:
            self._subscribers.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscribers:
                self._subscribers.remove(subscription)

    def publish(self, event_type: str, **fields) -> dict:
        return self.relay(dict(fields, eventType=event_type, timestamp=format_timestamp()))

    def relay(self, event: dict) -> dict:
        """Publish an event as it is (another instance's, with its eventType and timestamp)."""
        event_type = event["eventType"]
        frame = (f"event: {event_type}\ndata: "
                 f"{json.dumps(event, separators=(',', ':'))}\n\n").encode()
        with self._lock:
            subscribers = list(self._subscribers)
        for subscription in subscribers:
            if not subscription.wants(event_type) or subscription.overflowed:
                continue
            try:
                subscription.queue.put_nowait(frame)
            except queue.Full:
                subscription.overflowed = True
                self._drop_oldest_for_overflow(subscription)
        return event

    @staticmethod
    def _drop_oldest_for_overflow(subscription: Subscription) -> None:
        try:
            subscription.queue.get_nowait()
        except queue.Empty:
            pass
        subscription.queue.put_nowait(OVERFLOW)
