"""The conversation's past turns, and the part of them each prompt carries."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dllm_voice.app.conversation.text import approx_tokens, normalize


@dataclass
class Message:
    role: str  # user | assistant
    content: str
    interrupted: bool = False

    def as_chat(self) -> dict[str, str]:
        # An interrupted answer ends in an ellipsis: the convention for speech cut off mid-way,
        # which the LM reads as "the user stopped me here".
        text = self.content + ("..." if self.interrupted and self.content else "")
        return {"role": self.role, "content": text}


# A new turn that uses one of these refers back to the conversation ("How big is it?", "And
# what about Germany?"); one that says it changes the subject does not ("Actually, never mind
# that. Tell me ..."). Compared on normalize()d text.
_REFERS_BACK = re.compile(
    r"\b(it|its|it's|that|this|those|these|they|them|their|he|him|his|she|her|there|then|more"
    r"|again|another|else|also|too|same|instead|previous|earlier|before|what about|how about"
    r"|you said|you just|go on|continue)\b"
)
_NEW_SUBJECT = re.compile(
    r"\b(never ?mind|forget (it|that|about)|something else|new question|different question"
    r"|change the subject)\b"
)
_CONTINUATIONS = ("and", "but", "so", "or", "why", "how", "really")
# A tool's result as History.note_tool writes it into the user message of its turn.
_NOTED = re.compile(r"\n\([\w.-]+ says: [^\n]*\)")


def new_subject(text: str) -> bool:
    """Whether a user turn says it leaves what came before ("Never mind, tell me a joke")."""
    return bool(_NEW_SUBJECT.search(normalize(text)))


def refers_back(text: str) -> bool:
    """Whether a user turn needs the conversation before it to be understood."""
    t = normalize(text)
    words = t.split()
    if not words or new_subject(text):
        return False
    return len(words) <= 2 or words[0] in _CONTINUATIONS or bool(_REFERS_BACK.search(t))


class History:
    """The conversation's past turns and the part of them each prompt carries.

    ``mode`` (conversation.history): "full" sends the newest turns that fit the token budget;
    "follow_up" sends the last ``follow_up_turns`` exchanges only when the new turn refers back
    (``refers_back``), else none; "none" never sends past turns. A 135M model given the whole
    conversation answers a cooking question with the previous answer about the calendar; a
    larger model can take "full".
    """

    def __init__(
        self,
        budget_tokens: int,
        count_tokens: Callable[[str], int] = approx_tokens,
        mode: str = "full",
        follow_up_turns: int = 1,
    ):
        self.budget_tokens = budget_tokens
        self.count_tokens = count_tokens
        self.mode, self.follow_up_turns = mode, follow_up_turns
        self.messages: list[Message] = []

    def add_user(self, text: str) -> None:
        # A user message with no answer yet (the answer was cancelled before a word was played)
        # absorbs the next one: the user simply went on talking.
        if self.messages and self.messages[-1].role == "user":
            self.messages[-1].content = f"{self.messages[-1].content} {text}".strip()
        else:
            self.messages.append(Message("user", text))

    def revise_user(self, old: str, new: str) -> bool:
        """Put ``new`` in place of ``old`` in the newest user message that holds it (a long
        turn's words transcribed again after its final); False when none does."""
        for msg in reversed(self.messages):
            if msg.role == "user" and old and old in msg.content:
                head, _, tail = msg.content.rpartition(old)
                msg.content = f"{head}{new}{tail}"
                return True
        return False

    def forget(self, role: str, text: str) -> bool:
        """Drop the newest ``role`` message that begins with ``text`` (a client deleted it);
        False when none does."""
        for i in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[i]
            if msg.role == role and text and msg.content.startswith(text):
                del self.messages[i]
                return True
        return False

    def note_tool(self, name: str, result: object) -> None:
        """A tool's result joins the turn that called it (the newest user message), so it stays
        when the spoken answer is cut and a follow-up can use it."""
        user = next((m for m in reversed(self.messages) if m.role == "user"), None)
        if user is not None:
            user.content = f"{user.content}\n({name} says: {result})"

    def cut_short(self) -> str:
        """The words of the user's turn before this one when the user cut its answer and no
        tool ran in it ("Two cups of milk," [its answer heard, then cut] "roughly how many
        milliliters?"): what this turn may go on from; "" otherwise."""
        past = self.messages
        if past and past[-1].role == "user":
            past = past[:-1]  # this turn, committed
        if len(past) < 2 or past[-2].role != "user" or not past[-1].interrupted:
            return ""
        return "" if _NOTED.search(past[-2].content) else past[-2].content

    def add_assistant(self, text: str, interrupted: bool) -> None:
        if not text.strip():
            return
        self.messages.append(Message("assistant", text.strip(), interrupted))

    def _context(self, past: list[Message], pending: Message) -> list[Message]:
        """The past messages this prompt carries, oldest first."""
        if self.mode == "follow_up" and not refers_back(pending.content):
            return []
        return self._window(past, pending)

    def _window(self, past: list[Message], pending: Message) -> list[Message]:
        """The past messages a prompt that carries history carries, oldest first."""
        if self.mode == "none":
            return []
        if self.mode == "follow_up":
            starts = [i for i, m in enumerate(past) if m.role == "user"]
            past = past[starts[-min(self.follow_up_turns, len(starts))] :] if starts else []
        kept: list[Message] = []
        used = self.count_tokens(pending.content)
        for msg in reversed(past):
            used += self.count_tokens(msg.content)
            if used > self.budget_tokens:
                break
            kept.append(msg)
        # Never start the kept history with an assistant message cut from its question.
        while kept and kept[-1].role == "assistant":
            kept.pop()
        return kept[::-1]

    def lead(self, system: str) -> list[dict[str, str]]:
        """What the next turn's prompt starts with when it carries history: the system
        message and the past turns (a turn that does not carry them shares the first)."""
        past = self.messages
        if past and past[-1].role == "user":
            past = past[:-1]  # unanswered: it opens the next turn's user message
        chat = [{"role": "system", "content": system}] if system else []
        return chat + [m.as_chat() for m in self._window(past, Message("user", ""))]

    def prompt(self, system: str, user_text: str = "") -> list[dict[str, str]]:
        """System + the past turns the new one needs (``mode``) + the user message.

        The user message is ``user_text`` appended to a stored unanswered user message (the
        one just added, or one whose answer was cancelled unheard).
        """
        pending = Message("user", user_text)
        past = self.messages
        if past and past[-1].role == "user":
            pending = Message("user", f"{past[-1].content} {user_text}".strip())
            past = past[:-1]
        chat = [{"role": "system", "content": system}] if system else []
        chat += [m.as_chat() for m in self._context(past, pending)]
        chat.append(pending.as_chat())
        return chat


def words_of_turn(text: str, messages: list[dict[str, str]]) -> str:
    """What the user said in the turn whose last utterance is ``text`` and whose prompt is
    ``messages``: the prompt's user message, which carries before ``text`` the words of an
    earlier one no answer was heard to ("Two cups of milk," [its answer cut before a word]
    "roughly how many milliliters?"), but not past a tool's result noted in it: that call has
    run."""
    last = messages[-1] if messages else None
    if last is None or last["role"] != "user" or not last["content"].endswith(text):
        return text
    return _NOTED.split(last["content"])[-1].strip() or text
