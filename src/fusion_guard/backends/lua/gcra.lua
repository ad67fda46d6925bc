-- GCRA (generic cell rate algorithm) for several limits at once, all or nothing, on the
-- server's clock (TIME), so the clocks of the replicas never matter.
--
-- KEYS[i]        the state of limit i: its theoretical arrival time (TAT), integer microseconds
-- ARGV[2i - 1]   emission interval of limit i, microseconds (per / rate)
-- ARGV[2i]       tolerance of limit i, microseconds (interval * (burst - 1))
--
-- A call passes when, for every limit, TAT - now <= tolerance; then every TAT moves to
-- max(TAT, now) + interval. A refusal writes nothing, so it spends no limit's budget.
-- Each key expires when its TAT is reached: by then its state is back to full anyway.
--
-- Reply: one integer, the cheapest reply to parse: 0 when allowed, else
-- retry_after * 64 + i, where limit i (1 to 63) waits longest, retry_after microseconds (after it
-- every limit admits, if nothing else arrives meanwhile; exact below 2^53 / 64 us, 4.4 years).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tats = {}
local longest, refusing = 0, 0

for i = 1, #KEYS do
    local tolerance = tonumber(ARGV[2 * i])
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    if tat < now then
        tat = now
    end
    local wait = tat - tolerance - now
    if wait > longest then
        longest, refusing = wait, i
    end
    tats[i] = tat + tonumber(ARGV[2 * i - 1])
end

if refusing > 0 then
    return longest * 64 + refusing
end

for i = 1, #KEYS do
    -- '%.0f': Lua would otherwise print a 16-digit number as '1.7e+15' and lose precision.
    local ttl_ms = math.ceil((tats[i] - now) / 1000)
    redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', ttl_ms)
end
return 0
