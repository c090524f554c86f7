"""The timer tools (app/tools/builtin/timers.py): set, list and cancel on a clock the test
moves, alarms at the next such wall-clock time, and timers that really go off and speak."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from dllm_voice.app.tools.builtin import timers
from dllm_voice.app.tools.registry import ToolContext
from tests.app.tools.builtin_helpers import Clock, error_of, fixed_context


@pytest.fixture
def ctx() -> Iterator[ToolContext]:
    with fixed_context() as context:
        yield context


def test_timers_set_list_cancel(ctx: ToolContext) -> None:
    now = ctx.now
    assert isinstance(now, Clock)
    assert timers.list_timers(ctx=ctx) == "You have no timers."
    assert timers.set_timer(300, ctx=ctx) == "Timer set for 5 minutes."
    assert timers.set_timer(5400, "Pasta", ctx=ctx) == "Pasta timer set for 1 hour and 30 minutes."
    now.t += 72
    assert timers.list_timers(ctx=ctx) == (
        "You have 2 timers: the 5 minute timer, with 3 minutes and 48 seconds left; "
        "and the pasta timer, with 1 hour and 29 minutes left."
    )
    assert timers.cancel_timer("the pasta timer", ctx=ctx) == "Canceled your pasta timer."
    assert timers.list_timers(ctx=ctx) == (
        "You have one timer: the 5 minute timer, with 3 minutes and 48 seconds left."
    )
    assert error_of(lambda: timers.cancel_timer("pasta", ctx=ctx)) == "You have no pasta timer."
    assert timers.cancel_timer("", ctx=ctx) == "Canceled your 5 minute timer."
    assert error_of(lambda: timers.cancel_timer("", ctx=ctx)) == "You have no timers."


def test_reminders_set_list_cancel(ctx: ToolContext) -> None:
    said = timers.set_timer(1200, reminder="check the oven", ctx=ctx)
    assert said == "I'll remind you to check the oven in 20 minutes."
    timers.set_timer(600, reminder="call your mom", ctx=ctx)
    assert timers.list_timers(ctx=ctx) == (
        "You have 2 timers: the reminder to check the oven, with 20 minutes left; "
        "and the reminder to call your mom, with 10 minutes left."
    )
    assert timers.cancel_timer("oven", ctx=ctx) == "Canceled your reminder to check the oven."
    assert timers.cancel_timer("reminder", ctx=ctx) == "Canceled your reminder to call your mom."


def test_a_misheard_name_cancels_the_timer_it_sounds_like(ctx: ToolContext) -> None:
    timers.set_timer(600, "pasta", ctx=ctx)
    timers.set_timer(300, "eggs", ctx=ctx)
    timers.set_timer(900, "laundry", ctx=ctx)
    assert timers.cancel_timer("faster", ctx=ctx) == "Canceled your pasta timer."
    assert timers.cancel_timer("the x timer", ctx=ctx) == "Canceled your eggs timer."
    assert error_of(lambda: timers.cancel_timer("rice", ctx=ctx)) == "You have no rice timer."


def test_a_timer_that_went_off_is_forgotten(ctx: ToolContext) -> None:
    now = ctx.now
    assert isinstance(now, Clock)
    timers.set_timer(600, ctx=ctx)
    now.t += 601
    assert timers.list_timers(ctx=ctx) == "You have no timers."


def test_cancel_names_the_newest_or_all(ctx: ToolContext) -> None:
    timers.set_timer(60, ctx=ctx)
    timers.set_timer(120, ctx=ctx)
    timers.set_timer(90, "tea", ctx=ctx)
    assert timers.cancel_timer("1 minute", ctx=ctx) == "Canceled your 1 minute timer."
    assert timers.cancel_timer("timer", ctx=ctx) == "Canceled your 2 minute timer."
    timers.set_timer(30, ctx=ctx)
    assert timers.cancel_timer("all", ctx=ctx) == "Canceled 2 timers."


@pytest.mark.parametrize(
    ("seconds", "error"),
    [
        (0, "A timer has to be longer than zero seconds."),
        (-5, "A timer has to be longer than zero seconds."),
        (float("nan"), "A timer has to be longer than zero seconds."),
        (24 * 3600 + 1, "I can only set timers up to 24 hours."),
    ],
)
def test_set_timer_bad_lengths(ctx: ToolContext, seconds: float, error: str) -> None:
    assert error_of(lambda: timers.set_timer(seconds, ctx=ctx)) == error


def test_alarms(ctx: ToolContext) -> None:  # it is 12:41 PM, local time UTC
    assert timers.set_alarm("7:30 AM", ctx=ctx) == "Alarm set for 7:30 AM tomorrow."
    assert timers.set_alarm("7 pm", ctx=ctx) == "Alarm set for 7 PM."
    assert timers.set_alarm("7", ctx=ctx) == "Alarm set for 7 PM."  # the sooner 7
    assert timers.set_alarm("12:15", ctx=ctx) == "Alarm set for 12:15 AM tomorrow."
    assert timers.set_alarm("19:00", ctx=ctx) == "Alarm set for 7 PM."
    assert timers.set_alarm("noon", ctx=ctx) == "Alarm set for 12 PM tomorrow."
    assert timers.list_timers(ctx=ctx).startswith(
        "You have 6 alarms: the 7:30 AM alarm, in 18 hours and 49 minutes; "
    )
    assert timers.cancel_timer("7:30 AM alarm", ctx=ctx) == "Canceled your 7:30 AM alarm."
    assert error_of(lambda: timers.cancel_timer("8 am alarm", ctx=ctx)) == "You have no 8 am alarm."
    assert (
        error_of(lambda: timers.set_alarm("soon", ctx=ctx)) == "I don't understand the time 'soon'."
    )


def test_an_alarm_named_without_its_half_of_the_day(ctx: ToolContext) -> None:
    """ "Cancel the alarm for six thirty" cancels the 6:30 PM alarm, not the newest one."""
    timers.set_alarm("6:30 pm", ctx=ctx)
    timers.set_alarm("7 am", ctx=ctx)
    args = timers._parse_cancel("Cancel the alarm for six thirty.")
    assert args == {"label": "6:30 alarm"}
    assert timers.cancel_timer(str(args["label"]), ctx=ctx) == "Canceled your 6:30 PM alarm."
    assert timers.cancel_timer("7 alarm", ctx=ctx) == "Canceled your 7 AM alarm."


def test_an_alarm_as_a_reminder(ctx: ToolContext) -> None:  # it is 12:41 PM, local time UTC
    said = timers.set_alarm("5 PM", reminder="call Bob", ctx=ctx)
    assert said == "I'll remind you to call Bob at 5 PM."
    timers.set_alarm("7:30 AM", reminder="take out the trash", ctx=ctx)
    assert timers.list_timers(ctx=ctx) == (
        "You have 2 alarms: the reminder to call Bob, in 4 hours and 19 minutes; "
        "and the reminder to take out the trash, in 18 hours and 49 minutes."
    )
    assert timers.cancel_timer("trash", ctx=ctx) == (
        "Canceled your reminder to take out the trash."
    )
    assert timers.cancel_timer("5 pm alarm", ctx=ctx) == "Canceled your reminder to call Bob."


def test_timers_go_off_and_speak() -> None:
    said: list[str] = []
    done = threading.Event()

    def say(text: str) -> None:
        said.append(text)
        if len(said) == 3:
            done.set()

    ctx = ToolContext(say=say)
    try:
        timers.set_timer(0.05, ctx=ctx)
        timers.set_timer(0.1, "tea", ctx=ctx)
        timers.set_timer(0.15, "eggs", ctx=ctx)
        timers.set_timer(0.2, reminder="stretch", ctx=ctx)
        assert timers.cancel_timer("eggs", ctx=ctx) == "Canceled your eggs timer."
        assert done.wait(5)
        time.sleep(0.2)  # the canceled one would have spoken by now
        assert said == [
            "Your 0.05 second timer is done.",
            "Your tea timer is done.",
            "It's time to stretch.",
        ]
        assert timers.list_timers(ctx=ctx) == "You have no timers."
    finally:
        ctx.close()


def test_timers_set_from_many_threads_at_once(ctx: ToolContext) -> None:
    def set_some() -> None:
        for _ in range(25):
            timers.set_timer(600, ctx=ctx)

    threads = [threading.Thread(target=set_some) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert timers.list_timers(ctx=ctx).startswith("You have 200 timers: ")
    assert timers.cancel_timer("all", ctx=ctx) == "Canceled 200 timers."
