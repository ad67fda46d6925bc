-- GCRA (generic cell rate algorithm) for several limits at once, all or nothing, on the
-- server's clock (TIME), so the clocks of the replicas never matter; refusals are told
-- staggered openings (promises), so a fleet's refused callers come back spread out.
--
-- KEYS[2i - 1]   limit i's theoretical arrival time (TAT), integer microseconds
-- KEYS[2i]       limit i's promise cursor: its next opening not yet promised, then (after a
--                space, once a known caller was promised one) its frontier: one interval past
--                the last opening promised to a known caller, microseconds
-- KEYS[#KEYS]    when #KEYS is odd: the caller's promise (a known caller: a client key),
--                'opening index', where index is the limit that decided it
-- ARGV[2i - 1]   emission interval of limit i, microseconds (per / rate)
-- ARGV[2i]       tolerance of limit i, microseconds (interval * (burst - 1))
--
-- A known caller back before its promise is told it again, whatever the budgets say (the
-- openings before it are promised to others). Otherwise a call passes when, for every limit,
-- TAT - now <= tolerance; then every TAT moves to max(TAT, now) + interval. An admission reads
-- and writes no cursor. A refusal writes no TAT, so it spends no limit's budget: each refusing
-- limit's opening is max(cursor, TAT - tolerance) (its own next opening, or the next one not
-- promised yet), for an anonymous caller at most tolerance + interval (burst openings) past
-- max(frontier, TAT - tolerance) (the anonymous bound); the caller is promised the latest of
-- them, each refusing limit's cursor moves to that time plus its interval (never back), and a
-- known caller's frontier with it.
-- A stored TAT is never legitimately more than tolerance + interval ahead of now: one further
-- ahead (the server's clock stepped back) is taken as that much, and stored so, and the limit's
-- cursor is reset (its callers' promises, made on the old clock, are void).
-- A TAT key expires when its TAT is reached (the budget is full again by then), a cursor or a
-- caller's promise when its time is reached (every promise is in the past by then: it has
-- lapsed).
--
-- Reply: one integer, the cheapest reply to parse: 0 when allowed, else
-- retry_after * 64 + i, where limit i (1 to 31) has the latest opening, retry_after the
-- microseconds until it (exact below 2^53 / 64 us, 4.4 years).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local limits = math.floor(#KEYS / 2)
local caller = #KEYS > 2 * limits and KEYS[#KEYS] or nil

-- '%.0f': Lua would otherwise print a 16-digit number as '1.7e+15' and lose precision.
local function store(key, value, at)
    redis.call('SET', key, value, 'PX', math.ceil((at - now) / 1000))
end

local tats = {}
local refusing = false

for i = 1, limits do
    local tat = tonumber(redis.call('GET', KEYS[2 * i - 1])) or now
    local tolerance = tonumber(ARGV[2 * i])
    local highest = now + tolerance + tonumber(ARGV[2 * i - 1])
    if tat < now then
        tat = now
    elseif tat > highest then -- the clock stepped back: no budget is spent that far ahead,
        tat = highest -- and the promises made on the old clock are void
        store(KEYS[2 * i - 1], string.format('%.0f', tat), tat)
        redis.call('DEL', KEYS[2 * i])
    end
    if tat - tolerance > now then
        refusing = true
    end
    tats[i] = tat
end

-- A live promise lies before its limit's cursor (which moved past it); one that does not was
-- made before the cursor was reset (the clock stepped back, above) and is ignored.
if caller then
    local held = redis.call('GET', caller)
    if held then
        local at, index = string.match(held, '^(%d+) (%d+)$')
        at, index = tonumber(at), tonumber(index)
        if at and at > now and index and index <= limits then
            local cursor = tonumber(string.match(redis.call('GET', KEYS[2 * index]) or '', '^%d+'))
            if cursor and cursor > at then
                return (at - now) * 64 + index
            end
        end
    end
end

if not refusing then
    for i = 1, limits do
        local tat = tats[i] + tonumber(ARGV[2 * i - 1])
        store(KEYS[2 * i - 1], string.format('%.0f', tat), tat)
    end
    return 0
end

local latest, refused = now, 0
local promised = {}
for i = 1, limits do
    local tolerance = tonumber(ARGV[2 * i])
    local budget = tats[i] - tolerance
    if budget > now then
        local cursor, frontier = string.match(redis.call('GET', KEYS[2 * i]) or '', '^(%d+) ?(%d*)$')
        cursor, frontier = tonumber(cursor), tonumber(frontier)
        local opening = budget
        if cursor and cursor > opening then
            opening = cursor
        end
        if not caller then
            local base = budget
            if frontier and frontier > base then
                base = frontier
            end
            local bound = base + tolerance + tonumber(ARGV[2 * i - 1])
            if opening > bound then
                opening = bound
            end
        end
        promised[#promised + 1] = {i, cursor, frontier}
        if opening > latest then
            latest, refused = opening, i
        end
    end
end

for _, limit in ipairs(promised) do
    local i, cursor, frontier = limit[1], limit[2], limit[3]
    local after = latest + tonumber(ARGV[2 * i - 1])
    local moved = false
    if not cursor or after > cursor then
        cursor, moved = after, true
    end
    if caller and (not frontier or after > frontier) then
        frontier, moved = after, true
    end
    if moved then
        local value = string.format('%.0f', cursor)
        if frontier then
            value = value .. string.format(' %.0f', frontier)
        end
        store(KEYS[2 * i], value, cursor)
    end
end
if caller then
    store(caller, string.format('%.0f %d', latest, refused), latest)
end
return (latest - now) * 64 + refused
