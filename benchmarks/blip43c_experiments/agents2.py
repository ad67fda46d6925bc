import sys, functools
exec(open("agents.py").read().split("for seed in")[0])
for seed in map(int, sys.argv[2:]):
    sc = AgentsScenario(overload_s=4.0, seed=seed)
    res = run_virtual(functools.partial(run_agents, sc, ("helper",)), "asyncio")
    for p in res.run("helper").phases:
        print(seed, p.phase, p.calls, f"{p.within_deadline:.1%}", "sent back", p.budget_refusals, "retries", p.retries, f"rpa {p.refusals_per_accepted:.2f}")
