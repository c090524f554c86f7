"""A Realtime connection's conversation: its items in order, and the ids of items and events.

The API's client keeps a copy of the conversation and names items by id (``retrieve``,
``delete``, ``previous_item_id``), so every item the server adds is announced with the one
before it. Only the newest MAX_ITEMS are kept.
"""

from __future__ import annotations

from collections import OrderedDict

from dllm_voice.app.conversation.events import Event

MAX_ITEMS = 500  # items kept for retrieve and delete; older ones are forgotten


def new_item(item_id: str, kind: str, status: str = "completed", **fields: object) -> Event:
    return {"id": item_id, "object": "realtime.item", "type": kind, "status": status, **fields}


class Conversation:
    """The items of one conversation, and the counter every item and event id comes from."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self._n = 0
        self.items: OrderedDict[str, Event] = OrderedDict()
        self._seconds: dict[str, float] = {}  # user audio item -> its speech's length
        self._gens: dict[str, int] = {}  # finished assistant message item -> its generation

    def event(self, kind: str, **fields: object) -> Event:
        self._n += 1
        return {"type": kind, "event_id": f"event_{self._n}", **fields}

    def new_id(self, prefix: str = "item") -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    @property
    def last_item(self) -> str | None:
        return next(reversed(self.items), None)

    def append(self, item: Event) -> str | None:
        """Add ``item`` (a reference: later changes show in retrieve); returns the id before it."""
        previous = self.last_item
        self.items[item["id"]] = item
        while len(self.items) > MAX_ITEMS:
            old, _ = self.items.popitem(last=False)
            self._seconds.pop(old, None)
            self._gens.pop(old, None)
        return previous

    def add_item(self, item: Event) -> list[Event]:
        """``conversation.item.added`` and ``.done`` for an item the conversation takes whole."""
        previous = self.append(item)
        return [
            self.event("conversation.item.added", previous_item_id=previous, item=item),
            self.event("conversation.item.done", previous_item_id=previous, item=item),
        ]

    def user_text_item(self, item_id: str | None, text: str) -> list[Event]:
        content = [{"type": "input_text", "text": text}]
        return self.add_item(
            new_item(item_id or self.new_id(), "message", role="user", content=content)
        )

    def tool_output_item(self, item_id: str | None, call_id: str, output: str) -> list[Event]:
        item_id = item_id or self.new_id()
        return self.add_item(
            new_item(item_id, "function_call_output", call_id=call_id, output=output)
        )

    def retrieve(self, item_id: str) -> Event | None:
        item = self.items.get(item_id)
        return None if item is None else self.event("conversation.item.retrieved", item=item)

    def said(self, item_id: str) -> tuple[str, str] | None:
        """The role and words of a message item (its text or transcript); None for others."""
        item = self.items.get(item_id)
        if item is None or item["type"] != "message" or not item["content"]:
            return None
        part = item["content"][0]
        return item["role"], part.get("text") or part.get("transcript") or ""

    def delete(self, item_id: str) -> Event | None:
        if self.items.pop(item_id, None) is None:
            return None
        return self.event("conversation.item.deleted", item_id=item_id)
