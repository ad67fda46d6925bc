-- GCRA (generic cell rate algorithm) for several limits at once, all or nothing, on the
-- server's clock (TIME), so the clocks of the replicas never matter; refusals are told
-- staggered openings (promises), so a fleet's refused callers come back spread out.
--
-- KEYS[2i - 1]   limit i's theoretical arrival time (TAT), integer microseconds
-- KEYS[2i]       limit i's promise cursor: its next opening not yet promised, microseconds
-- ARGV[2i - 1]   emission interval of limit i, microseconds (per / rate)
-- ARGV[2i]       tolerance of limit i, microseconds (interval * (burst - 1))
--
-- A call passes when, for every limit, TAT - now <= tolerance; then every TAT moves to
-- max(TAT, now) + interval. An admission reads and writes no cursor. A refusal writes no TAT,
-- so it spends no limit's budget: each refusing limit's opening is max(cursor, TAT - tolerance)
-- (its own next opening, or the next one not promised yet), the caller is promised the latest
-- of them, and each refusing limit's cursor moves to that time plus its interval.
-- A TAT key expires when its TAT is reached (the budget is full again by then), a cursor key
-- when its time is reached (every promise is in the past by then: it has lapsed).
--
-- Reply: one integer, the cheapest reply to parse: 0 when allowed, else
-- retry_after * 64 + i, where limit i (1 to 31) has the latest opening, retry_after the
-- microseconds until it (exact below 2^53 / 64 us, 4.4 years).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local limits = #KEYS / 2
local tats = {}
local refusing = false

for i = 1, limits do
    local tat = tonumber(redis.call('GET', KEYS[2 * i - 1])) or now
    if tat < now then
        tat = now
    end
    if tat - tonumber(ARGV[2 * i]) > now then
        refusing = true
    end
    tats[i] = tat
end

-- '%.0f': Lua would otherwise print a 16-digit number as '1.7e+15' and lose precision.
local function store(key, at)
    redis.call('SET', key, string.format('%.0f', at), 'PX', math.ceil((at - now) / 1000))
end

if not refusing then
    for i = 1, limits do
        store(KEYS[2 * i - 1], tats[i] + tonumber(ARGV[2 * i - 1]))
    end
    return 0
end

local latest, refused = now, 0
local promised = {}
for i = 1, limits do
    local opening = tats[i] - tonumber(ARGV[2 * i])
    if opening > now then
        local cursor = tonumber(redis.call('GET', KEYS[2 * i]))
        if cursor and cursor > opening then
            opening = cursor
        end
        promised[#promised + 1] = i
        if opening > latest then
            latest, refused = opening, i
        end
    end
end

for _, i in ipairs(promised) do
    store(KEYS[2 * i], latest + tonumber(ARGV[2 * i - 1]))
end
return (latest - now) * 64 + refused
