"""The adaptive limit's tuned constants (``GradientLimit``, ``_adaptive.py``), each with the
reason it has its value and, where one was measured, the figure and the command behind it. The
limit and its parts (``_adaptive_probe.py``, ``_overload_ceiling.py``, ``_latency_estimates.py``)
read them from here.
"""

from __future__ import annotations

__all__ = [
    "CEILING_BASELINES",
    "CEILING_MAX_SECONDS",
    "CEILING_SECONDS",
    "DEAD_BAND",
    "EARLY_FACTOR",
    "EARLY_RUN_CHANCE",
    "EARLY_SAMPLES",
    "FIRST_PROBE_CALLS",
    "FIRST_PROBE_SAMPLES",
    "FIRST_SAMPLES",
    "GROWTH_GRADIENT",
    "GROWTH_SAMPLES_PER_SLOT",
    "LEVEL_REFERENCE",
    "LEVEL_SAMPLES",
    "LEVEL_SPREAD",
    "OVERTAKING_MEMORY",
    "PARALLELISM_WEIGHT",
    "PROBE_GRACE_CALLS",
    "PROBE_SPACING_BASELINES",
    "QUIET_SAMPLES",
    "SIGHTED_GROWTH",
    "SIGHTED_WINDOWS",
    "SLACK_FROM_AT_ONCE",
    "SLOW_START",
    "SLOW_START_CONFIDENCE",
    "SLOW_WINDOW_SAMPLES",
    "UNCROWDED_CONFIDENCE",
]

#: A gradient within [1 / DEAD_BAND, DEAD_BAND] holds the limit (noise of a small median).
DEAD_BAND = 1.25
#: Uncrowded calls whose median is the baseline.
QUIET_SAMPLES = 60
#: Probes come at least this many baselines apart, so a slow tool does not probe all the time.
PROBE_SPACING_BASELINES = 200
#: A window closes early once this many calls in a row each took EARLY_FACTOR x the tolerated
#: latency or more, and is decided on them alone: the tool has lost capacity, and waiting for a
#: full window of such slow calls is what made the limit take seconds to come down. (Until
#: 2026-12-07 it took the window's fastest call so far, so the fast calls that ended before the
#: tool slowed down held the window open: 0.75-0.80 s, not 0.40 s, for the shifting demo's
#: limit to come within 2x of one worker after eight, median over seeds 1-40.)
EARLY_SAMPLES = 5
EARLY_FACTOR = 3.0
#: ... unless the tool's own uncrowded calls make such a run this likely at any one call: a tool
#: whose quiet calls are often that slow (a lookup tool's expensive queries: 20 % of its calls at
#: 30x the median) then needs a longer run. Five in a row of those came by chance about once in
#: half a minute at 0.8x, and each cut the limit to a quarter: 6.8 % shed, not 2.2 %
#: (``python benchmarks/zoo.py --models arg_cost --loads 0.8 --no-special --seeds 4-8``).
EARLY_RUN_CHANCE = 1e-4
#: A window that would only grow the limit closes once it holds this many calls per slot (and
#: has lasted ``window``): at a limit of 1 a full window takes ``window_samples`` services one
#: after another, so a limit that a noisy window had cut to 1 took a second or more to climb.
GROWTH_SAMPLES_PER_SLOT = 5
#: The gradient such a short window needs to grow the limit (a full window needs DEAD_BAND): the
#: median of a few calls is noisier, and a limit pushed up by noise puts calls in the tool's queue.
GROWTH_GRADIENT = 1.5
#: Weight of a window's estimate in ``parallelism`` when it is higher (the first, or a lower one,
#: is taken as measured): the standing queue and the default queue follow it, one window of
#: lucky calls read 4.6 for a tool of 2 workers, and a queue too long costs more than one too
#: short. A tool that lost workers is followed at once.
PARALLELISM_WEIGHT = 0.3
#: For this many calls after ``k + 1`` calls were seen served at once (one ended while ``k``
#: admitted before it still ran), latency cuts stop at ``k + 1`` slots and ``parallelism`` is at
#: least that. A tool that loses workers stops showing it once the calls inside from before have
#: ended, so the memory is short: with 30, one shifting run in 30 took 2.25 s (the target is 2)
#: for its limit to come within 2x of a tool gone from 8 workers to 1.
OVERTAKING_MEMORY = 20
#: A new limit holds its initial value until this many quiet calls have come by themselves
#: (later probes wait for ``probe_samples``): the first baseline rests on more calls, since every
#: window is read against it and a first baseline of 10 heavy-tailed calls came out up to three
#: times the true median.
FIRST_SAMPLES = 30
#: ... or until this many crowded calls have come first: then it makes room for quiet ones (a
#: probe). Probing at once, as it did before, held a fresh guard at a quarter of its limit for
#: the first calls: 4.0 s, not 1.0 s, for a first burst of 8 calls of 0.5 s.
FIRST_PROBE_CALLS = 50
#: ... and that probe ends once this many quiet calls have come (those of the warm-up count),
#: not FIRST_SAMPLES: it holds the limit at the quiet bound, often one slot, and a fresh guard
#: at half the load of an 8-connection pool of 40 ms calls (4 in flight: crowded from the
#: start) shed 1-5 % of its first 20 s in that probe, waiting for 30 (``python
#: benchmarks/error_sim.py --only independent``, docs/adaptive-tried.md). Half of
#: FIRST_SAMPLES: with 10, the shallower baseline was lifted by a few slow calls in a row
#: (tests/concurrency/test_concurrency_adaptive.py, a tool that lost a worker).
FIRST_PROBE_SAMPLES = 15
#: A probe first holds the slots the tool appears to serve in parallel (``parallelism``, whole),
#: and cuts to the quiet bound only after this many crowded calls more: a burst that is ending
#: leaves quiet calls by itself, and a cut to one slot of a 2-worker FIFO pool (no call ever
#: overtakes another, so the quiet bound is 1) mid-burst drained 30 callers 5 ms apart at 1.34x
#: the ideal time. A standing load gets its cut after these calls.
PROBE_GRACE_CALLS = 10
#: A slow tool (its uncrowded call outlasts ``window``) gathers calls slowly: 20 calls of 1-5 s
#: at 4 slots are 15 s, and a limit that grows one slot a window took minutes to reach the
#: tool's workers. So a window also closes once its calls, at the uncrowded latency, amount to
#: ``window_samples x window`` seconds of service, but not before this many; and the first
#: baseline once its quiet calls amount to ``FIRST_SAMPLES x window`` seconds, not before this
#: many either (those started before the longest one seen: the short ones finish first). For a
#: tool faster than the window, ``window_samples`` and FIRST_SAMPLES come first, as before.
SLOW_WINDOW_SAMPLES = 5
#: After an overload error at ``n`` calls in flight, the limit does not grow to ``n`` again for
#: this long (seconds), or CEILING_BASELINES uncrowded latencies if longer: each try above a
#: pool that fails fast when full costs at least one failed call.
CEILING_SECONDS = 1.0
CEILING_BASELINES = 20
#: A ceiling confirmed again within its own hold after it lapsed is held twice as long, up to
#: this (seconds): a pool that stays the same size is tried less and less often.
CEILING_MAX_SECONDS = 16.0

# --- The slow tool's warm-up and climb (issue 41, the zoo's slow LLM tool; docs/adaptive-tried.md,
# "The slow tool: the sighting's slack and growth by sighting"). Figures: ``python
# benchmarks/slow_tool_variants.py --variants default --seeds 1-6 --per-seed`` (tuned) and
# ``--seeds 7-12`` (held out).

#: A slow tool, for the two rules below: its calls (its baseline, once measured) outlast this many
#: windows (0.5 s by default). The zoo's fixed-window upstream API, 120 ms a call and paced,
#: went from 1.00x to 0.93x fixed 10 at 4x on seed 3 when the rules held from one window.
SIGHTED_WINDOWS = 5
#: A slow tool's call counts as quiet with one call more in flight than the tool was seen serving
#: at once, once this many were seen and that one more reaches the limit. The sighting needs the
#: youngest call to end before every older one: at 4 slots of a tool of 8 workers, 1-5 s a call,
#: 3 at once were seen for 54 s before 4 (seed 2 at 0.8x), quiet calls stayed rare, and a first
#: baseline of 5 calls measured at 1.77 s (the median is 3 s) held the limit at 4-5 slots: 10 %
#: shed at 0.8x. A tool of exactly as many workers as seen queues that one call, by about a
#: fraction of a service; from 3, not less: a tool of 1 or 2 workers is not read so.
SLACK_FROM_AT_ONCE = 3
#: A slow tool's window in which every slot was seen served at once (and not slower than the
#: cut's bar) grows the limit by this factor, not one slot: such a window queued nothing inside
#: the tool, and one slot a window of seconds kept the limit below 8 workers past the zoo's 30 s
#: of warm-up (seed 1 at 0.8x: 2.4 % shed, 0.0 % with it).
SIGHTED_GROWTH = 1.5

# -- the first probe: calls in flight shown uncrowded by their latency (issue 41, probe41) ------

#: Until the first baseline, the calls that started with ``k`` in flight count as quiet once the
#: median of LEVEL_SAMPLES of them (the last ones at ``k``) is within DEAD_BAND of the median of
#: the calls that came alone (at the quiet bound), at least LEVEL_REFERENCE of those: the tool
#: queued none of them. A FIFO pool of 2 workers never lets a call overtake another, so its
#: quiet bound was one slot, and a warm burst of 40-60 callers (``python
#: benchmarks/warm_burst_grid.py --calls 40``) waited out the first probe at that one slot,
#: 1.20-1.65x the ideal drain; an 8-connection pool at half its load (4 in flight, a fresh
#: guard's 4 slots) probed at one or two slots for a second (``python benchmarks/error_sim.py
#: --only independent``). A tool that queues at ``k`` (one worker: a call started behind
#: another takes 1.5-2x) never shows it, and gets its probe as before.
LEVEL_SAMPLES = 5
LEVEL_REFERENCE = 2
#: ... and only while those LEVEL_SAMPLES calls lie within this factor of one another: five calls
#: of a steady tool tell its median within a few per cent, five of a heavy-tailed one (the demo's
#: tool, log-normal sigma 1: they differ tenfold) tell nothing at a band of DEAD_BAND, and a
#: count of such calls taken as uncrowded lifted the first baseline and the limit with it
#: (``python benchmarks/virtual_demo.py --seeds 1-40 --max-active auto``: within the SLO at
#: 1.5x-10x missed on 7 seeds, not 3). Five calls of log-normal sigma 0.1 (the error
#: simulation's pool) spread past it about once in thirty.
LEVEL_SPREAD = 1.5

# -- the climb of a tool whose calls are steady (issue 41, the 16-connection pool) -------------

#: A full window (``window_samples`` calls) whose median took no longer than DEAD_BAND x the
#: uncrowded latency beyond its noise (UNCROWDED_CONFIDENCE) queued none of its calls inside: its
#: estimate of the parallelism is taken at once, not by PARALLELISM_WEIGHT (as a slow tool's
#: window with room already was). A pool of 16 connections of 40 ms at half its load (8 in
#: flight) had the slots in force under overload (the parallelism and one) at 3-5 for the first
#: 2.5 s, the estimate rising by 0.3 of each window's: 5.7-9.6 % shed over 20 s, 3.1-8.1 % with
#: it (``python benchmarks/error_sim.py --only independent --queuing-pool 16 --seeds 1-8``; what
#: else was tried: docs/adaptive-internals.md, "The climb of a steady tool").
#: ... beyond the noise of its median: this many of its standard errors, read off the window's
#: own calls (a log-normal median's is about 0.93 x the log of their interquartile ratio over the
#: root of their count; 2 x 0.93, rounded up). So a heavy-tailed tool's lucky window (the
#: demo's, log-normal sigma 1: a band of 0.56 in logs at 20 calls) seldom passes, and a steady
#: tool's (sigma 0.1: 0.05) does.
UNCROWDED_CONFIDENCE = 2.0
#: A slow tool's slow start: until its first window that shows queueing inside the tool, its
#: parallelism reads this many times the calls in flight, so the slots in force under overload
#: (the parallelism and one) climb by a share a window, not one slot, while its calls come back
#: as fast as uncrowded. A first baseline of a few 1-5 s calls errs by a quarter or more (seed
#: 1 of the zoo's slow tool: 1.9 s, the tool's median 3 s), so a window shows queueing only
#: beyond the noise of both medians: its median's lower bound (this many standard errors, read
#: off order statistics: a window of 5 calls, its fastest) above the quiet calls' upper bound.
#: At 1.5 standard errors seed 1 at 0.8x still shed 2.8 %, at 2.5 and 3 none; 3 kept on the
#: tuned seeds' goodput at 1.5x (seeds 1-6 and 13-18, docs/adaptive-tried.md: "The overload
#: detector in openings").
SLOW_START = 1.5
SLOW_START_CONFIDENCE = 3.0
