"""``/v1/realtime``: one OpenAI Realtime API client's session, on the same VoiceSession as /ws.

Its messages are parsed by messages.py, its settings kept by settings.py, and every event of
the session goes out translated by translate.py. Audio is base64 in JSON both ways, in the
format the client chose, resampled to and from our models' rates (formats.py). With turn
detection off (push-to-talk) the appended audio waits in a buffer until the client commits it;
the commit is transcribed whole and waits, as a typed item does, for ``response.create``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from dllm_voice.app.config import Config, ConfigError, with_changes
from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.control import Refused, apply_settings
from dllm_voice.app.conversation.scheduler import URGENT
from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.protocol import (
    Audio,
    CancelResponse,
    ClientError,
    CreateItem,
    ToolOutput,
)
from dllm_voice.app.server.realtime.formats import Converter, to_client, to_pipeline
from dllm_voice.app.server.realtime.messages import (
    AddItem,
    ClearAudio,
    ClearOutput,
    Command,
    CommitAudio,
    CreateResponse,
    DeleteItem,
    RetrieveItem,
    TruncateItem,
    UpdateSession,
    parse,
)
from dllm_voice.app.server.realtime.settings import RealtimeSettings
from dllm_voice.app.server.realtime.translate import RealtimeEvents, as_beta
from dllm_voice.app.tools.registry import ToolDefinitionError

if TYPE_CHECKING:
    from websockets.asyncio.server import ServerConnection

    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.session import VoiceSession
    from dllm_voice.app.server.server import VoiceServer

log = logging.getLogger(__name__)

MIN_COMMIT_MS = 100  # the API refuses to commit less audio than this


def transcribe(components: Components, cfg: Config, pcm: np.ndarray) -> str:
    """In the ASR worker: a committed push-to-talk buffer, heard whole."""
    transcriber = components.new_transcriber(cfg.asr)
    transcriber.feed(pcm)
    return transcriber.final().text


class RealtimeConnection(Connection):
    """A VoiceSession spoken to in the OpenAI Realtime API's events."""

    def __init__(
        self,
        ws: ServerConnection,
        server: VoiceServer,
        peer: str = "",
        model: str = "",
        beta: bool = False,
    ) -> None:
        super().__init__(ws, server, peer)
        self.beta = beta  # an OpenAI-Beta: realtime=v1 client: events under the beta names
        cfg = server.cfg
        self.settings = RealtimeSettings(cfg, model=model or "dllm-voice")
        self.api = RealtimeEvents(f"conv_{self.id}")
        self.client_tools: list[dict[str, object]] = []
        self._event_id: str | None = None  # of the client event being handled
        self._ptt: list[np.ndarray] = []  # push-to-talk audio not yet committed, at 16 kHz
        self._committing: asyncio.Task[None] | None = None
        self._in = to_pipeline(self.settings.input_format, cfg.audio.sample_rate_hz)
        self._out: Converter | None = None
        self._out_gen = -1

    # ---- out ------------------------------------------------------------------------------------

    def emit(self, event: events.Event) -> None:
        for ev in self.api.translate(event):
            self.send_event(ev)

    def send_event(self, event: events.Event) -> None:
        said = as_beta(event) if self.beta else event
        if said is not None:
            super().send_event(said)

    def audio_message(self, gen: int, pcm: bytes) -> str | None:
        assert self.server.components is not None
        if self._out is None or gen != self._out_gen:  # a new answer: no filter tail carried
            self._out = to_client(
                self.settings.output_format, self.server.components.tts.sample_rate_hz
            )
            self._out_gen = gen
        evs = self.api.audio(gen, self._out.feed(pcm))
        if not evs:
            return None
        for ev in evs[:-1]:
            self.send_event(ev)
        return json.dumps(as_beta(evs[-1]) if self.beta else evs[-1])

    def refuse(self, exc: ClientError | Refused) -> None:
        event_id = exc.event_id if isinstance(exc, ClientError) else None
        self.send_event(
            self.api.error("invalid_request_error", str(exc), event_id or self._event_id)
        )

    def _session_event(self, kind: str) -> None:
        tools = self.session.tools if self.session is not None else None
        choice = tools.choice if tools is not None else "auto"
        describe = self.settings.as_beta_json if self.beta else self.settings.as_json
        session = describe(self.id, self.client_tools, choice)
        self.send_event(self.api.event(kind, session=session))

    def greet(self) -> None:
        self._session_event("session.created")

    def start(self, session: VoiceSession) -> None:
        super().start(session)
        self._apply(self.settings, self._config(self.settings))

    # ---- in -------------------------------------------------------------------------------------

    def handle_message(self, message: str | bytes) -> None:
        self._event_id = None
        event_id, command = parse(message)
        self._event_id = event_id
        self.dispatch_realtime(command)

    def dispatch_realtime(self, command: Command) -> None:
        session, control = self.session, self.control
        assert session is not None and control is not None
        match command:
            case Audio(data):
                self._append(data)
            case CommitAudio():
                self._commit()
            case ClearAudio():
                self._ptt.clear()
                self.send_event(self.api.event("input_audio_buffer.cleared"))
            case ClearOutput() | CancelResponse():
                session.cancel_response()
            case AddItem(CreateItem(text), item_id):
                control.create_item(text)
                self._send_all(self.api.user_text_item(item_id, text))
            case AddItem(ToolOutput(call_id, output), item_id):
                control.tool_output(call_id, output)
                self._send_all(self.api.tool_output_item(item_id, call_id, output))
            case DeleteItem(item_id):
                self._delete(item_id)
            case RetrieveItem(item_id):
                self._one(self.api.retrieve(item_id), item_id)
            case TruncateItem(item_id, audio_end_ms):
                self._truncate(item_id, audio_end_ms)
            case CreateResponse():
                if self._committing is not None and not self._committing.done():
                    self._committing.add_done_callback(lambda _: self._respond_later(command))
                else:
                    self._respond(command)
            case UpdateSession(given):
                self._update(given)

    def _send_all(self, evs: list[events.Event]) -> None:
        for ev in evs:
            self.send_event(ev)

    def _one(self, ev: events.Event | None, item_id: str) -> None:
        if ev is None:
            raise ClientError(f"no item {item_id!r} in the conversation")
        self.send_event(ev)

    def _delete(self, item_id: str) -> None:
        """The item leaves the conversation: the history, or the typed items still waiting."""
        said = self.api.said(item_id)
        self._one(self.api.delete(item_id), item_id)
        if said is None:
            return
        role, text = said
        session, control = self.session, self.control
        assert session is not None and control is not None
        if not (role == "user" and control.withdraw(text)):
            session.tm.history.forget(role, text)

    def _append(self, data: bytes) -> None:
        pcm = np.frombuffer(self._in.feed(data), dtype="<i2").astype(np.int16)
        if not self.settings.push_to_talk:
            self._push(pcm.tobytes())
            return
        self.last_audio = time.monotonic()
        held = sum(len(p) for p in self._ptt) + len(pcm)
        if held * 1000 > self.buffer_ms * self.server.cfg.audio.sample_rate_hz:
            raise ClientError(
                f"input_audio_buffer.append: the buffer holds at most {self.buffer_ms // 1000} s; "
                "commit it first"
            )
        self._ptt.append(pcm)

    def _commit(self) -> None:
        if not self.settings.push_to_talk:
            raise ClientError(
                "input_audio_buffer.commit: the server ends turns itself (turn_detection); set "
                "turn_detection to null for push-to-talk"
            )
        rate = self.server.cfg.audio.sample_rate_hz
        pcm = np.concatenate(self._ptt) if self._ptt else np.zeros(0, dtype=np.int16)
        if len(pcm) * 1000 < MIN_COMMIT_MS * rate:
            raise ClientError(
                f"input_audio_buffer.commit: {len(pcm) * 1000 // rate} ms of audio; at least "
                f"{MIN_COMMIT_MS} ms is needed"
            )
        self._ptt.clear()
        item_id = self.api.new_id()
        self._send_all(self.api.committed(item_id, len(pcm) * 1000 / rate))
        self._committing = asyncio.ensure_future(self._transcribe(item_id, pcm))

    async def _transcribe(self, item_id: str, pcm: np.ndarray) -> None:
        components, session, control = self.server.components, self.session, self.control
        assert components is not None and session is not None and control is not None
        try:
            text = await components.asr_worker.submit(
                transcribe, components, session.cfg, pcm, priority=URGENT, key=self
            )
        except Exception as exc:  # noqa: BLE001 - the session goes on without this turn
            log.warning("session %s: push-to-talk transcription failed: %s", self.id, exc)
            error = {"type": "server_error", "code": "asr_error", "message": str(exc)}
            self.send_event(
                self.api.event(
                    "conversation.item.input_audio_transcription.failed",
                    item_id=item_id,
                    content_index=0,
                    error=error,
                )
            )
            return
        self._send_all(self.api.transcript_final(text, item_id))
        if text.strip():
            try:
                control.create_item(text.strip())
            except Refused as exc:
                self.refuse(exc)

    def _respond_later(self, command: CreateResponse) -> None:
        try:
            self._respond(command)
        except (ClientError, Refused) as exc:
            self.refuse(exc)

    def _respond(self, command: CreateResponse) -> None:
        """``response.create``, with this response's own instructions and modalities."""
        session, control = self.session, self.control
        assert session is not None and control is not None
        tm, settings = session.tm, self.settings
        modalities = command.modalities or settings.modalities
        prompt = tm.cfg
        if command.instructions is not None:
            tm.cfg = dataclasses.replace(prompt, system_prompt=command.instructions)
        session.speaks, self.api.modalities = "audio" in modalities, modalities
        try:
            control.create_response()
        finally:  # the answer took its prompt and modality when it started
            tm.cfg = prompt
            session.speaks, self.api.modalities = settings.speaks, settings.modalities

    def _truncate(self, item_id: str, audio_end_ms: float) -> None:
        gen = self.api.gen_of(item_id)
        if gen is None:
            raise ClientError(f"conversation.item.truncate: no assistant audio item {item_id!r}")
        assert self.sink is not None
        self.sink.report(gen, audio_end_ms, stopped=True)
        self.send_event(
            self.api.event(
                "conversation.item.truncated",
                item_id=item_id,
                content_index=0,
                audio_end_ms=int(audio_end_ms),
            )
        )

    def _update(self, given: dict[str, object]) -> None:
        """``session.update``: all of it applies, or none (Refused names the first bad key)."""
        settings = self.settings.update(given)
        ours = given.get("dllm_voice")
        cfg = self._config(settings, ours.get("settings") if isinstance(ours, dict) else None)
        session = self.session
        assert session is not None
        if "tools" in given or "tool_choice" in given:
            tools, choice = given.get("tools"), given.get("tool_choice")
            try:
                session.tools.set_client_tools(tools, choice)
            except ToolDefinitionError as exc:
                raise Refused(f"session.update: {exc}") from None
            if isinstance(tools, list):
                self.client_tools = [t for t in tools if isinstance(t, dict)]
        self._apply(settings, cfg)
        self._session_event("session.updated")

    @staticmethod
    def _config(settings: RealtimeSettings, own: object = None) -> Config:
        """The session's config under ``settings`` and our own config keys (``own``)."""
        try:
            cfg = with_changes(settings.base, settings.changes())
        except ConfigError as exc:
            raise Refused(f"session.update: {str(exc).removeprefix('config: ')}") from None
        return apply_settings(cfg, own) if own else cfg

    def _apply(self, settings: RealtimeSettings, cfg: Config) -> None:
        """Make ``settings`` and ``cfg`` the session's."""
        session, control = self.session, self.control
        assert session is not None and control is not None
        if settings.input_format != self.settings.input_format:
            self._in = to_pipeline(settings.input_format, cfg.audio.sample_rate_hz)
        if settings.output_format != self.settings.output_format:
            self._out = None
        if not settings.push_to_talk:
            self._ptt.clear()
        self.settings = settings
        self.api.modalities, self.api.extras = settings.modalities, settings.extras
        session.speaks = settings.speaks
        td = settings.turn_detection
        session.tm.answers_turns = td is None or bool(td["create_response"])
        control.cfg = cfg
        session.configure(cfg)
