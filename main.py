"""Command line: load the configuration once, build the components, run one subcommand.

`python main.py` alone starts a live microphone conversation (`chat`). Heavy imports happen
inside each subcommand so that `--help` and configuration errors answer instantly.
"""

from __future__ import annotations

import os

# Before torch loads: idle OpenMP threads sleep instead of spinning. On 2 shared cores spinning
# workers starved the other models (LM ttft 3 s -> 0.33 s with PASSIVE, measured under load).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import sys
from collections.abc import Callable

from dllm_voice.app.config import Config, ConfigError, load_config, render_yaml


def _cmd_chat(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.app.terminal.chat import chat

    return chat(cfg)


def _cmd_serve(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.app.server.server import serve

    return serve(cfg)


def _cmd_ask(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.model.cli import ask

    lm_cfg = cfg.lm if args.decoder is None else _replace(cfg.lm, decoder=args.decoder)
    question = " ".join(args.question)
    if cfg.tools.enabled:
        from dllm_voice.app.terminal.ask import ask as ask_with_tools

        return ask_with_tools(_replace(cfg, lm=lm_cfg), question, json_stats=args.json)
    return ask(lm_cfg, question, system=cfg.conversation.system_prompt, json_stats=args.json)


def _cmd_tune(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.model.tune import run

    return run(
        cfg.lm,
        system=cfg.conversation.system_prompt,
        n_prompts=args.prompts,
        max_new=args.max_new_tokens,
        rounds=args.rounds,
        out=args.out or "",
    )


def _cmd_run(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.app.terminal.runner import run_wavs

    return run_wavs(cfg, args.input, output=args.output, trace=args.trace, realtime=args.realtime)


def _cmd_trace(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.app.observe.trace_export import trace_export
    from dllm_voice.app.observe.trace_tools import trace_summary

    if args.action == "summary":
        return trace_summary(args.file)
    if args.chrome is None and args.html is None:
        raise ConfigError("trace export: give --chrome OUT.json and/or --html OUT.html")
    return trace_export(args.file, chrome=args.chrome, html=args.html)


def _cmd_devices(cfg: Config, args: argparse.Namespace) -> int:
    from dllm_voice.audio.devices import list_devices

    print(list_devices())
    return 0


def _cmd_config(cfg: Config, args: argparse.Namespace) -> int:
    sys.stdout.write(render_yaml(cfg))
    return 0


def _replace(section: object, **changes: object) -> object:
    import dataclasses

    return dataclasses.replace(section, **changes)  # type: ignore[type-var]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="YAML configuration (default: config.yaml beside main.py)",
    )
    common.add_argument(
        "--set",
        metavar="SECTION.KEY=VALUE",
        action="append",
        default=argparse.SUPPRESS,
        dest="overrides",
        help="override one setting, e.g. --set lm.decoder=hybrid (repeatable)",
    )
    parser = argparse.ArgumentParser(
        prog="main.py",
        parents=[common],
        description="Real-time voice agent with a hybrid diffusion LM. "
        "Without a subcommand: a live microphone conversation (chat).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands: dict[str, Callable[[Config, argparse.Namespace], int]] = {}

    def add(name: str, fn: Callable[[Config, argparse.Namespace], int], help: str):
        commands[name] = fn
        return sub.add_parser(name, parents=[common], help=help, description=help)

    add("chat", _cmd_chat, "live microphone conversation (the default)")
    add("serve", _cmd_serve, "websocket server + web page: talk to the agent in a browser")
    p = add("ask", _cmd_ask, "text in, streamed answer out")
    p.add_argument("question", nargs="+", help="the question")
    p.add_argument(
        "--decoder",
        choices=("ar", "hybrid", "parallel"),
        default=None,
        help="decoding mode (default: lm.decoder)",
    )
    p.add_argument("--json", action="store_true", help="print generation stats as JSON after")
    p = add("run", _cmd_run, "voice turn(s) from WAV files, reply to a WAV file")
    p.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="WAV",
        help="a user utterance; repeat for consecutive turns. WAV@MS starts that input MS ms "
        "after the agent began its previous answer (a barge-in; implies --realtime)",
    )
    p.add_argument("--output", metavar="WAV", help="write the agent's reply audio here")
    p.add_argument("--trace", metavar="JSONL", help="write the latency trace here")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="pace input and output in real time, as a microphone would",
    )
    p = add(
        "tune", _cmd_tune, "search this machine's fastest lossless decoding profile for lm.path"
    )
    p.add_argument("--prompts", type=int, default=16, help="tuning prompts (at most 24)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="answer length per prompt")
    p.add_argument("--rounds", type=int, default=2, help="coordinate-descent rounds at most")
    p.add_argument("--out", metavar="JSON", help="write here (default: where lm.profile '' looks)")
    p = add("trace", _cmd_trace, "latency trace tools: summary table, Chrome/HTML export")
    p.add_argument("action", choices=("summary", "export"))
    p.add_argument("file", metavar="TRACE.jsonl")
    p.add_argument("--chrome", metavar="OUT.json", help="export: Chrome/Perfetto trace events")
    p.add_argument("--html", metavar="OUT.html", help="export: self-contained waterfall page")
    add("devices", _cmd_devices, "list audio input/output devices")
    add("config", _cmd_config, "print the effective configuration as commented YAML")
    parser.set_defaults(commands=commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command or "chat"
    try:
        cfg = load_config(getattr(args, "config", None), getattr(args, "overrides", None))
        return args.commands[command](cfg, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - user-facing errors become one line, bugs re-raise
        if not _is_user_error(exc):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1


def _is_user_error(exc: BaseException) -> bool:
    """Errors with a message meant for the user: bad config, missing device, bad model file."""
    from dllm_voice.audio.errors import AudioError
    from dllm_voice.model.errors import ModelError

    return isinstance(exc, ConfigError | AudioError | ModelError)


if __name__ == "__main__":
    sys.exit(main())
