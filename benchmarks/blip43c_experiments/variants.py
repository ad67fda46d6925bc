import math
from fusion_guard.client import AdaptiveThrottle, RetryBudget

_last = {}
RESET_ON_FAST = False

class ShutBudget(RetryBudget):
    """No retry while the throttle has shut within `lately` s (a sustained overload)."""
    def __init__(self, *a, lately=0.0, **kw):
        super().__init__(*a, **kw)
        self.throttle = _last["t"]
        self.lately = lately
    def withdraw(self):
        t = self.throttle
        now = t._clock()
        if self.lately == -2:
            pass
        elif self.lately >= 0:
            if now < t._shut_until + self.lately:
                return False
        elif not (now < t._open_until or t._open(now)):
            return False
        return super().withdraw()

from fusion_guard.client import Retrying
_orig_stop = Retrying._stop

def _stop(self, error, tool, attempt, deadline, bound):
    b = self._budget
    if isinstance(b, ShutBudget) and b.lately == -2:
        t = b.throttle
        now = t._clock()
        if not (now < t._open_until or t._open(now)):
            return "budget"
    return _orig_stop(self, error, tool, attempt, deadline, bound)

Retrying._stop = _stop

def register(rb):
    now = rb._now
    P = rb.Policy
    def thr(pat):
        def f(rng):
            t = AdaptiveThrottle(patience=pat, clock=now, rng=rng)
            _last["t"] = t
            return t
        return f
    extra = [
        P("shutbudget", lambda: ShutBudget(clock=now), thr(0.0), max_attempts=5),
        P("shutbudget pr", lambda: ShutBudget(refund=True, clock=now), thr(0.5), max_attempts=5),
        P("shutnow", lambda: ShutBudget(lately=-1, clock=now), thr(0.0), max_attempts=5),
        P("shutnow pr", lambda: ShutBudget(lately=-1, refund=True, clock=now), thr(0.5), max_attempts=5),
        P("early shut", lambda: ShutBudget(lately=-2, clock=now), thr(0.0), max_attempts=5),
        P("early shut pr", lambda: ShutBudget(lately=-2, refund=True, clock=now), thr(0.5), max_attempts=5),
    ]
    for p in extra:
        rb.POLICIES[p.name] = p


class LongK2(AdaptiveThrottle):
    """k_long once shut `after` s; accepts read as the larger of the window's and the last two
    slices' rate (so a server accepting more is followed within a slice or two)."""
    __slots__ = ("_since", "_klong", "_after", "_fast", "_n", "_thresh", "_born", "_cont")

    def __init__(self, k=1.8, *, k_long=1.5, after=2.0, fast=True, n=2, thresh=1.0, cont=False, **kw):
        super().__init__(k, **kw)
        self._cont = cont; self._n = n; self._thresh = thresh; self._born = self._clock()
        self._since = math.inf
        self._klong = k_long
        self._after = after
        self._fast = fast

    def _open(self, now):
        was_within = now < self._shut_until
        r = super()._open(now)
        if self._cont:
            if r:
                self._since = math.inf
            elif self._since == math.inf:
                self._since = now
        elif not r and not was_within:
            self._since = now
        return r

    def _acc(self, now):
        w = self._accepts
        total = w.total(now)
        if not self._fast:
            return total
        sl = w._slice
        n = self._n
        start = w.end - n * sl
        recent = sum(w._counts[len(w._counts) - (n - 1):]) + w.newest
        span = sl * (len(w._counts) + 1)
        elapsed = max(now - start, sl * (n - 1))
        est = recent * min(span, now - self._born) / elapsed
        if est > self._thresh * total:
            if RESET_ON_FAST:
                self._since = now
            return est
        return total

    def admit(self):
        now = self._clock()
        window = self._requests
        if now < self._open_until or self._open(now):
            window.add(now)
            return True
        requests = window.total(now)
        window.add(now)
        k = self._klong if now - self._since >= self._after else self._k
        excess = requests - k * self._acc(now)
        return excess <= 0 or self._random.random() * (requests + 1) >= excess


def register2(rb):
    now = rb._now
    P = rb.Policy
    for kl in (1.4, 1.5, 1.8):
        for pr in (False, True):
          for n, th in ((2, 1.0), (4, 1.3)):
            name = f"lk2 {kl}" + (" pr" if pr else "") + ("" if n == 2 else f" n{n} t{th}")
            rb.POLICIES[name] = P(name,
                (lambda: RetryBudget(refund=True, clock=now)) if pr else (lambda: RetryBudget(clock=now)),
                lambda rng, kl=kl, pr=pr, n=n, th=th: LongK2(k_long=kl, n=n, thresh=th, patience=0.5 if pr else 0.0, clock=now, rng=rng),
                max_attempts=5)


def register3(rb):
    now = rb._now
    P = rb.Policy
    for kl in (1.4, 1.5):
        for floor, ratio in ((0.1, 0.25), (0.2, 0.25), (0.1, 0.35)):
            name = f"lk2 {kl} pr n4 t1.3 f{floor} r{ratio}"
            rb.POLICIES[name] = P(name,
                lambda floor=floor, ratio=ratio: RetryBudget(ratio, min_per_second=floor, refund=True, clock=now),
                lambda rng, kl=kl: LongK2(k_long=kl, n=4, thresh=1.3, patience=0.5, clock=now, rng=rng),
                max_attempts=5)


def register4(rb):
    now = rb._now
    P = rb.Policy
    for kl in (1.4, 1.5):
        for fast in (True, False):
            name = f"lk3 {kl}" + (" fast" if fast else "")
            rb.POLICIES[name] = P(name,
                lambda: RetryBudget(refund=True, clock=now),
                lambda rng, kl=kl, fast=fast: LongK2(k_long=kl, fast=fast, cont=True, n=4, thresh=1.3, patience=0.5, clock=now, rng=rng),
                max_attempts=5)


def register5(rb):
    now = rb._now
    P = rb.Policy
    def thr(kl):
        def f(rng):
            global RESET_ON_FAST
            RESET_ON_FAST = True
            return LongK2(k_long=kl, fast=True, n=4, thresh=1.3, patience=0.5, clock=now, rng=rng)
        return f
    for kl in (1.4, 1.5):
        name = f"lk4 {kl}"
        rb.POLICIES[name] = P(name, lambda: RetryBudget(refund=True, clock=now), thr(kl), max_attempts=5)


class NoFlicker(AdaptiveThrottle):
    """Within a window of a shut, the gate opens only at `gate_factor` x the half share."""
    __slots__ = ("_gf",)

    def __init__(self, *, gate_factor=0.0, **kw):
        super().__init__(**kw)
        self._gf = gate_factor
        self._gate = self._gate * gate_factor


def register6(rb):
    now = rb._now
    P = rb.Policy
    for gf in (0.0, 0.5):
        for pr in (False, True):
            name = f"nf {gf}" + (" pr" if pr else "")
            rb.POLICIES[name] = P(name,
                (lambda: RetryBudget(refund=True, clock=now)) if pr else (lambda: RetryBudget(clock=now)),
                lambda rng, gf=gf, pr=pr: NoFlicker(gate_factor=gf, patience=0.5 if pr else 0.0, clock=now, rng=rng),
                max_attempts=5)
