"""The model's line: one model run at a time, every other waiting in the order it came, each told its place
and about how long until its turn.

A model-running event (Generate, a Lesson step, Compare, Sweep, the ar baseline) joins the line, waits
while it says where it stands, runs once it is first, and leaves (done, stopped or failed). Gradio's
queue lets many such events start (the model events' concurrency limit, app.ui), so that a request
answered without the model -- a run remembered or shipped -- never waits behind live runs, and a
waiting one can say its place in its own words instead of Gradio's.

The estimate of a wait is the sum, over the runs ahead, of what each expects to take: the measured
seconds per step of this pair's last runs times the method's expected steps (Generate), or the last
duration of the same kind of request (the others); a run with no measurement yet is counted as
unknown, and the words say so. The line is bounded (MOST tickets, PER_SESSION per tab).

Knows no view: the handlers (app.generation, app.lesson, app.comparison) turn its words into updates.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

MOST = 48             # tickets in the line at most (running one included); the next is told to come back
PER_SESSION = 2       # tickets of one tab at most (one running or waiting, one more waiting)
TICK_S = 0.5          # how often a waiting request looks at the line (its turn, a twin's result, Stop)
SAY_AGAIN_S = 5.0     # how often it says the same place again (a new place is said at once)


@dataclass(eq=False)
class Ticket:
    session: str | None
    what: str                      # "Generate", "Lesson", "Compare", "Sweep", "the ar baseline"
    seconds: float | None          # expected seconds of its run (None: nothing measured yet)
    started: float | None = None   # when its turn came


class Full(Exception):
    """The line cannot take this request; str(e) says why and when to try again."""


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def about(seconds: float) -> str:
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


class Line:
    def __init__(self, most: int = MOST, per_session: int = PER_SESSION):
        self.most, self.per_session = most, per_session
        self._order: list[Ticket] = []      # first: the one running (or about to)
        self._turn = threading.Condition()

    def join(self, session: str | None, what: str, seconds: float | None) -> Ticket:
        """A ticket at the end of the line, or Full (the line or this tab's share of it)."""
        with self._turn:
            if len(self._order) >= self.most:
                wait = self._ahead_s(len(self._order))
                raise Full(f"the model's line is full ({self.most} runs waiting or running"
                           + (f", {about(wait)} of work): try again in {about(wait)}" if wait else "): try again shortly"))
            mine = [t.what for t in self._order if session is not None and t.session == session]
            if len(mine) >= self.per_session:
                raise Full(f"this tab already has {len(mine)} runs in the model's line ({', '.join(mine)}): wait "
                           "for one to finish, or press Stop")
            ticket = Ticket(session, what, seconds)
            self._order.append(ticket)
            if len(self._order) == 1:
                ticket.started = time.monotonic()
            return ticket

    def place(self, ticket: Ticket) -> int:
        """How many runs are ahead of the ticket (0: its turn)."""
        with self._turn:
            return self._order.index(ticket)

    def wait(self, ticket: Ticket, timeout: float = TICK_S) -> bool:
        """Wait up to timeout for the ticket's turn; whether it has come."""
        with self._turn:
            return self._turn.wait_for(lambda: self._order[0] is ticket, timeout)

    def leave(self, ticket: Ticket) -> None:
        """The ticket's run is done, stopped or failed, or it no longer needs the model."""
        with self._turn:
            if ticket in self._order:
                first = self._order[0] is ticket
                self._order.remove(ticket)
                if first and self._order:
                    self._order[0].started = time.monotonic()
                self._turn.notify_all()

    def _ahead_s(self, n: int) -> float | None:
        """Expected seconds of the first n tickets' work left (the running one's remainder at least 1 s);
        None when one of them has no estimate."""
        total, now = 0.0, time.monotonic()
        for t in self._order[:n]:
            if t.seconds is None:
                return None
            total += max(t.seconds - (now - t.started), 1.0) if t.started is not None else t.seconds
        return total

    def words(self, ticket: Ticket) -> str | None:
        """"Waiting for the model: 3rd in line, about 9 s" (None once it is the ticket's turn)."""
        with self._turn:
            n = self._order.index(ticket) if ticket in self._order else 0
            if n == 0:
                return None
            wait = self._ahead_s(n)
            ahead = ", ".join(t.what for t in self._order[:n][:3]) + (", …" if n > 3 else "")
            return (f"Waiting for the model: {ordinal(n)} in line ({ahead} ahead), "
                    + (f"{about(wait)} by the measured pass time" if wait is not None
                       else "no estimate yet (a run ahead is of a kind not measured on this server)")
                    + ". Stop leaves the line.")

    def __len__(self) -> int:
        with self._turn:
            return len(self._order)


class Durations:
    """The last measured durations by kind (a bounded memory): what the line's estimates are made of."""

    def __init__(self, most: int = 256):
        self.most, self._kept = most, OrderedDict()
        self._lock = threading.Lock()

    def note(self, kind, seconds: float) -> None:
        with self._lock:
            self._kept[kind] = seconds
            self._kept.move_to_end(kind)
            while len(self._kept) > self.most:
                self._kept.popitem(last=False)

    def get(self, kind) -> float | None:
        with self._lock:
            return self._kept.get(kind)


LINE = Line()
DURATIONS = Durations()
