"""The agents demo's short run (as tests/demo/test_demo_agents.py) with a candidate throttle:
python agents.py default|KLONG[,nofast][,cont][,reset] SEED..."""
import sys, functools, random
import os
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests")); sys.path.insert(0, HERE)
from fusion_guard.demo import _agents
from fusion_guard.demo._agents import AgentsScenario, run_agents, OVERLOAD, BLIP, RECOVERY
from fusion_guard.client import RetryBudget
from virtual_time import run_virtual
import variants
cand = sys.argv[1]
if cand != "default":
    kl = float(cand.split(",")[0]); fast = "nofast" not in cand; cont = "cont" in cand; variants.RESET_ON_FAST = "reset" in cand
    _agents.default_budget = lambda clock: RetryBudget(refund=True, clock=clock)
    _agents.default_throttle = lambda clock, rng: variants.LongK2(k_long=kl, fast=fast, cont=cont, n=4, thresh=1.3, patience=0.5, clock=clock, rng=rng)
for seed in map(int, sys.argv[2:]):
    sc = AgentsScenario(overload_s=4.0, seed=seed)
    res = run_virtual(functools.partial(run_agents, sc, ("no retry", "helper")), "asyncio")
    h = res.run("helper"); n = res.run("no retry")
    calls = sum(p.calls for p in h.phases); retries = sum(p.retries for p in h.phases)
    ov = h.phase(OVERLOAD)
    print(f"seed {seed}: overload apc {ov.attempts_per_call:.2f} rpa {ov.refusals_per_accepted:.2f} good {ov.goodput:.1f} (no retry {n.phase(OVERLOAD).goodput:.1f}); "
          f"blip {h.phase(BLIP).within_deadline:.1%}; back {h.phase(RECOVERY).goodput:.1f} rec {h.recovery_goodput:.1f}; retries {retries} <= {0.25*calls+3:.0f}; budget refusals {sum(p.budget_refusals for p in h.phases)}")
